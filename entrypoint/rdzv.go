package entrypoint

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// progressEvery is how often a node that waits says what it waits for.
const progressEvery = 5 * time.Second

// Role is whether this node hosts the rendezvous, and why.
type Role struct {
	Host   bool
	Reason string
	// Addr is this node's address that the rendezvous host names, when
	// that decided it: workers reach node rank 0 there.
	Addr string
}

func (r Role) String() string {
	if r.Host {
		return "hosts the rendezvous: " + r.Reason
	}
	return "joins the rendezvous: " + r.Reason
}

// DecideRole says whether this node hosts the rendezvous: told so, node
// rank 0, or one of its addresses is the rendezvous host's. A host name
// that does not resolve yet (a Service whose records come with its pods)
// is looked up again until the join timeout, saying so.
func DecideRole(ctx context.Context, p *Plan, local func() ([]netip.Addr, error), stderr io.Writer) (Role, error) {
	if p.Replicated() && p.NodeRank >= 0 {
		// Resolve made sure the rank is known: it decides.
		r := Role{Host: p.NodeRank == 0, Reason: fmt.Sprintf("node rank %d (%s)", p.NodeRank, p.From["NodeRank"])}
		if p.NodeRank < len(p.Peers) {
			r.Reason += fmt.Sprintf(", which hosts store replica %d of %d at %s", p.NodeRank+1, len(p.Peers), p.Peers[p.NodeRank])
		}
		return r, nil
	}
	switch {
	case p.Host:
		return Role{Host: true, Reason: "--rdzv-host"}, nil
	case p.NodeRank == 0:
		return Role{Host: true, Reason: "node rank 0 (" + p.From["NodeRank"] + ")"}, nil
	case p.NodeRank > 0:
		return Role{Reason: fmt.Sprintf("node rank %d (%s)", p.NodeRank, p.From["NodeRank"])}, nil
	}
	mine, err := local()
	if err != nil {
		return Role{}, fmt.Errorf("this node's addresses: %w", err)
	}
	var ips []netip.Addr
	err = waitFor(ctx, p, stderr, "the rendezvous host's name to resolve", func(ctx context.Context) error {
		ips, err = lookup(ctx, p.RdzvHost)
		return err
	})
	if err != nil {
		return Role{}, err
	}
	for _, ip := range ips {
		for _, m := range mine {
			if ip == m {
				return Role{Host: true, Reason: fmt.Sprintf("%s is this node's address %s", p.RdzvHost, ip), Addr: ip.String()}, nil
			}
		}
	}
	return Role{Reason: fmt.Sprintf("%s (%s) is not one of this node's addresses", p.RdzvHost, ips[0])}, nil
}

func lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(ips) == 0 {
		err = fmt.Errorf("%s has no address", host)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, err
}

// LocalAddrs lists this machine's interface addresses.
func LocalAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// waitForHost waits until the rendezvous host's store accepts connections.
func waitForHost(ctx context.Context, p *Plan, stderr io.Writer) error {
	return waitFor(ctx, p, stderr, "the rendezvous host "+p.Endpoint(), func(ctx context.Context) error {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", p.Endpoint())
		if err == nil {
			c.Close()
		}
		return err
	})
}

// waitFor tries try until it succeeds, backing off to a second between
// tries, and gives up after the plan's join timeout; every progressEvery it
// says what it waits for and why the last try failed.
func waitFor(ctx context.Context, p *Plan, stderr io.Writer, what string, try func(context.Context) error) error {
	start, said := time.Now(), time.Now()
	pause := 50 * time.Millisecond
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		waited := time.Since(start)
		if p.JoinTimeout > 0 && waited >= p.JoinTimeout {
			return fmt.Errorf("waited %s (--join-timeout) for %s: %v", p.JoinTimeout, what, err)
		}
		if time.Since(said) >= progressEvery {
			said = time.Now()
			fmt.Fprintf(stderr, "muster: waiting for %s (%v) for %s of %s (--join-timeout)\n", what, err,
				waited.Round(time.Second), p.JoinTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for %s", what)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
