package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/listing"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// replicaTimeout bounds each replica's answer to `launcher stores`: one
// that is down must not hold up the others' rows for long.
const replicaTimeout = 2 * time.Second

// changeTimeout bounds `launcher stores add|remove`: long enough to wait
// for a leader (leaderWait), then for raft to commit the change.
const changeTimeout = 20 * time.Second

// leaderWait bounds how long `launcher stores add|remove` waits for a
// replica that leads: an election takes a few seconds at most.
const leaderWait = 10 * time.Second

func storesCommand() *cli.Command {
	return &cli.Command{
		Name: "stores",
		Usage: "list the store's replicas: role, term, applied index, last contact with the leader; " +
			"add or remove a replica (needs --cluster)",
		Description: "Asks each replica directly, all at once, at most 2s each: those --cluster HOST:PORT,... (or MUSTER_CLUSTER) names,\n" +
			"and those the configuration lists (as the leader, or else the first replica to answer, knows it).\n" +
			"ROLE is leader, follower, candidate, single (a store that is not replicated) or unreachable (-o wide says why).\n" +
			"Exits 1, saying why, when no replica leads.\n" +
			"LAST-CONTACT is how long before its answer a follower last heard from the leader, by the replica's clock.",
		ArgsUsage: " ",
		Flags:     append(clusterFlags(true), outputFlag(string(listing.Table), "print a table, a wide one, or a ReplicaList")),
		Before:    checkOutput,
		Action:    listStores,
		Subcommands: []*cli.Command{
			changeReplicasCommand("add", false, "add the replica at HOST:PORT (its agent's --listen) to the store (the cluster operator's; needs --cluster)",
				"Start its agent first with --listen HOST:PORT, --store-peers (the replicas, itself among them), --store-join\n"+
					"and --data-dir; raft uses the port after HOST:PORT. The leader adds it as a voter, and it catches up."),
			changeReplicasCommand("remove", true, "remove the replica at HOST:PORT from the store (the cluster operator's; needs --cluster)",
				"Name it as `launcher stores` lists it. The leader removes it from the configuration; its agent may then stop.\n"+
					"Removing the leader has another replica lead."),
		},
	}
}

// listStores is `launcher stores`: a row for each replica, asked directly.
func listStores(c *cli.Context) error {
	if c.NArg() > 0 {
		return cmdline.Usagef(c, "unknown stores command %q: list the replicas, or add or remove HOST:PORT", c.Args().First())
	}
	f, _ := outputFormat(c)
	addrs, err := clusterAddrs(c)
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		return cmdline.Usagef(c, "stores needs --cluster HOST:PORT,... (or MUSTER_CLUSTER): no agent serves this machine, and it asks a running store's replicas")
	}
	// What --cluster names must be reachable safely: else the command
	// line is wrong, as for the other cluster commands.
	for _, a := range addrs {
		if _, err := clusterSecurity(c, a); err != nil {
			return cli.Exit(err.Error(), cmdline.UsageExitCode)
		}
	}
	secFor := func(addr string) (security.Security, error) { return clusterSecurity(c, addr) }
	answers := askReplicas(addrs, secFor)
	asked := map[string]bool{}
	for _, a := range slices.Concat(addrs, addrsOf(answers)) {
		asked[a] = true
	}
	var more []string
	for _, a := range configuration(answers) {
		if !asked[a] {
			more, asked[a] = append(more, a), true
		}
	}
	l := listing.Replicas(append(answers, askReplicas(more, secFor)...))
	if err := listing.WriteReplicas(c.App.Writer, f, l); err != nil {
		return cli.Exit("stores: "+err.Error(), 1)
	}
	if !l.Led() {
		return cli.Exit("no replica leads: "+l.WhyNoLeader(), 1)
	}
	return nil
}

func addrsOf(answers []listing.ReplicaAnswer) []string {
	var out []string
	for _, a := range answers {
		out = append(out, a.Addr)
	}
	return out
}

// configuration is the replicas as the leader lists them, else as the
// first replica that answered does: a replica cut off may know an old one.
func configuration(answers []listing.ReplicaAnswer) []string {
	var first []string
	for _, a := range answers {
		role := a.Status.GetRole()
		if a.Err != nil || a.Status == nil || role == musterv1.ReplicaRole_REPLICA_ROLE_SINGLE {
			continue
		}
		if role == musterv1.ReplicaRole_REPLICA_ROLE_LEADER {
			return a.Status.GetReplicas()
		}
		if first == nil {
			first = a.Status.GetReplicas()
		}
	}
	return first
}

// askReplicas asks each of addrs for its status, all at once.
func askReplicas(addrs []string, secFor func(string) (security.Security, error)) []listing.ReplicaAnswer {
	out := make([]listing.ReplicaAnswer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		// The token file is read here, not by each goroutine.
		sec, err := secFor(addr)
		if err != nil {
			out[i] = listing.ReplicaAnswer{Addr: addr, Err: err, At: time.Now()}
			continue
		}
		wg.Go(func() { out[i] = askReplica(addr, sec) })
	}
	wg.Wait()
	return out
}

// askReplica asks the replica at addr for its own status, within
// replicaTimeout. A replica reached through an agent's socket is listed
// under its store address.
func askReplica(addr string, sec security.Security) listing.ReplicaAnswer {
	a := listing.ReplicaAnswer{Addr: addr}
	a.Status, a.Err = replicaStatus(addr, sec)
	a.At = time.Now()
	if a.Err == nil && security.IsUnixAddr(addr) && a.Status.GetAddr() != "" {
		a.Addr = a.Status.GetAddr()
	}
	return a
}

func replicaStatus(addr string, sec security.Security) (*musterv1.ReplicaStatusResponse, error) {
	cl, err := storeclient.Dial(addr, sec)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), replicaTimeout)
	defer cancel()
	st, err := cl.ReplicaStatus(ctx, &musterv1.ReplicaStatusRequest{})
	switch status.Code(err) {
	case codes.OK:
		return st, nil
	case codes.DeadlineExceeded:
		return nil, fmt.Errorf("no answer within %s", replicaTimeout)
	case codes.Unimplemented:
		return nil, errors.New("its agent does not list replicas: upgrade it")
	}
	return nil, errors.New(storeclient.ErrorMessage(err))
}

// changeReplicasCommand is `launcher stores add|remove HOST:PORT`.
func changeReplicasCommand(name string, remove bool, usage, description string) *cli.Command {
	return &cli.Command{
		Name:        name,
		Usage:       usage,
		Description: description,
		ArgsUsage:   "HOST:PORT",
		Flags:       clusterFlags(true),
		// The argument is checked before the store is asked anything.
		Before: func(c *cli.Context) error {
			_, err := replicaArg(c)
			return err
		},
		Action: clusterActionWithin(changeTimeout, func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			addr, _ := replicaArg(c)
			fail := func(err error, hint string) error {
				return cli.Exit(fmt.Sprintf("stores %s %s: %s%s", name, addr, changeMessage(err), hint), 1)
			}
			var st *musterv1.ReplicaStatusResponse
			err := untilLed(ctx, cl, func() (err error) {
				st, err = cl.ReplicaStatus(ctx, &musterv1.ReplicaStatusRequest{})
				return err
			})
			if err != nil {
				return fail(err, "")
			}
			// Later tries may go to any replica, not only those --cluster named.
			cl.LearnReplicas(st.GetReplicas())
			before := st.GetReplicas()
			if remove && !slices.Contains(before, addr) && st.GetRole() != musterv1.ReplicaRole_REPLICA_ROLE_SINGLE {
				return cli.Exit(fmt.Sprintf("stores remove %s: not among the store's replicas (%s): name one as launcher stores lists it",
					addr, strings.Join(before, ", ")), 1)
			}
			var resp *musterv1.ChangeReplicasResponse
			err = untilLed(ctx, cl, func() (err error) {
				resp, err = cl.ChangeReplicas(ctx, &musterv1.ChangeReplicasRequest{Addr: addr, Remove: remove})
				return err
			})
			if err != nil {
				return fail(err, "")
			}
			fmt.Fprintln(c.App.Writer, listing.DescribeReplicaChange(addr, remove, before, resp.GetReplicas()))
			return nil
		}),
	}
}

// replicaArg is the one HOST:PORT argument of stores add|remove: a
// replica's store address, whose next port raft uses.
func replicaArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", cmdline.Usagef(c, "name one replica as HOST:PORT, its agent's --listen (got %d arguments)", c.NArg())
	}
	arg := c.Args().First()
	host, port, err := net.SplitHostPort(arg)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65534 {
		return "", cmdline.Usagef(c, "%q: want HOST:PORT, the replica's store address (its agent's --listen), port 1 to 65534 (raft uses the next one)", arg)
	}
	return arg, nil
}

// untilLed makes call until it is not refused for want of a leader or of a
// reachable replica, for at most leaderWait: after each refusal the client
// moves to the leader named, or to the next replica it knows of. Of the
// refusals, a replica's word that none leads is the one returned.
func untilLed(ctx context.Context, cl *storeclient.Client, call func() error) error {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	var noLeader error
	for {
		err := call()
		leader, refused := storeclient.LeaderOf(err)
		if status.Code(err) != codes.Unavailable || (!refused && !cl.Replicated()) {
			return err
		}
		if refused && leader == "" {
			noLeader = err
		}
		select {
		case <-ctx.Done():
			return cmp.Or(noLeader, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// changeMessage words a failed change, saying what to do.
func changeMessage(err error) string {
	leader, refused := storeclient.LeaderOf(err)
	switch {
	case refused && leader == "":
		return "no replica leads now: try again once one does (launcher stores lists the replicas)"
	case status.Code(err) == codes.Unavailable:
		return storeclient.ErrorMessage(err) + " (launcher stores lists which replicas answer)"
	case status.Code(err) == codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within %s: launcher stores lists which replicas answer and which leads", changeTimeout)
	}
	return storeclient.ErrorMessage(err)
}
