// Command lightagents plays many muster agents over real gRPC, for the scale
// benchmark: each registers, watches its command stream, answers
// ReservePorts (with made-up ports: it starts no workers) and answers a Stop
// by reporting its worker stopped. It runs apart from the store, so that
// both processes have their own file-descriptor limit.
//
//	lightagents agents -addr HOST:PORT -token T -n N [-conns C]
//	lightagents floor -n N -size BYTES
//
// In agents mode it prints "ready" once every agent has registered and
// opened its stream, then a line each time all N agents
// hold their assignment of a round (TOTAL: the assignments' bytes, LARGEST:
// the largest one's), as "assigned ROUND TOTAL LARGEST".
//
// In floor mode it is the bare gRPC barrier the store is measured against:
// a server with the store's Register and Watch that prints "listening
// ADDR", and on each Submit waits until N Watch streams are open and sends
// each one message of BYTES bytes, with no state machine at all.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: lightagents agents|floor [flags]")
		os.Exit(2)
	}
	raiseFDLimit()
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "", "store address")
	token := fs.String("token", "", "cluster token")
	n := fs.Int("n", 1, "number of agents")
	conns := fs.Int("conns", 0, "gRPC connections the agents share; 0: one each")
	size := fs.Int("size", 512, "floor: bytes of each message")
	fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "agents":
		err = agents(*addr, *token, *n, *conns)
	case "floor":
		err = floor(*n, *size)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lightagents:", err)
		os.Exit(1)
	}
}

func raiseFDLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

// rounds counts, per round, the agents that hold their assignment.
type rounds struct {
	n       int
	mu      sync.Mutex
	got     map[string]int
	total   map[string]int
	largest map[string]int
}

func (r *rounds) assigned(id string, size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[id]++
	r.total[id] += size
	r.largest[id] = max(r.largest[id], size)
	if r.got[id] == r.n {
		say("assigned %s %d %d", id, r.total[id], r.largest[id])
		delete(r.got, id)
		delete(r.total, id)
		delete(r.largest, id)
	}
}

func agents(addr, token string, n, conns int) error {
	if conns <= 0 || conns > n {
		conns = n
	}
	clients := make([]*storeclient.Client, conns)
	for i := range clients {
		c, err := storeclient.DialAgent(addr, security.Security{Token: token})
		if err != nil {
			return err
		}
		clients[i] = c
	}
	r := &rounds{n: n, got: map[string]int{}, total: map[string]int{}, largest: map[string]int{}}
	var opened sync.WaitGroup
	errc := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := 0; i < n; i++ {
		opened.Add(1)
		sem <- struct{}{}
		go func() {
			c := clients[i%conns]
			a := &agent{c: c, rounds: r, jobs: map[string]*musterv1.Assignment{}}
			err := a.open(i)
			<-sem
			opened.Done()
			if err != nil {
				errc <- err
				return
			}
			errc <- a.run()
		}()
	}
	opened.Wait()
	say("ready")
	return <-errc
}

type agent struct {
	c       *storeclient.Client
	rounds  *rounds
	session string
	watch   musterv1.Agents_WatchClient
	jobs    map[string]*musterv1.Assignment
}

func (a *agent) open(i int) error {
	ctx := context.Background()
	reg, err := a.c.Register(ctx, &musterv1.RegisterRequest{Node: &musterv1.Node{
		Name: fmt.Sprintf("la-%05d", i), Addr: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Rank: -1}})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	a.session = reg.GetSession()
	a.watch, err = a.c.Watch(ctx, &musterv1.WatchRequest{Session: a.session})
	return err
}

func (a *agent) run() error {
	ctx := context.Background()
	for {
		cmd, err := a.watch.Recv()
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		switch c := cmd.GetCommand().(type) {
		case *musterv1.AgentCommand_ReservePorts:
			_, err = a.c.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session,
				RoundId: c.ReservePorts.GetRoundId(), Ports: []int32{29500, 29501}})
		case *musterv1.AgentCommand_Start:
			a.jobs[c.Start.GetJobId()] = c.Start
			a.rounds.assigned(c.Start.GetRoundId(), proto.Size(cmd))
		case *musterv1.AgentCommand_Stop:
			asg := a.jobs[c.Stop.GetJobId()]
			delete(a.jobs, c.Stop.GetJobId())
			if asg == nil {
				continue
			}
			var evs []*musterv1.JobEvent
			for l := int32(0); l < asg.GetNproc(); l++ {
				evs = append(evs, &musterv1.JobEvent{JobId: asg.GetJobId(), Event: &musterv1.JobEvent_Exited{Exited: &musterv1.WorkerExited{
					Rank: asg.GetNodeRank()*asg.GetNproc() + l, LocalRank: l, Stopped: true, Signal: 15}}})
			}
			_, err = a.c.Publish(ctx, &musterv1.PublishRequest{Session: a.session, Events: evs})
		}
		if err != nil {
			return err
		}
	}
}

// floorServer is the barrier floor: Register and Watch as the store has
// them, and a Submit that releases one message to every open stream.
type floorServer struct {
	musterv1.UnimplementedAgentsServer
	musterv1.UnimplementedJobsServer
	n   int
	msg *musterv1.AgentCommand

	mu      sync.Mutex
	streams int
	full    chan struct{} // closed once n streams are open
	release chan struct{} // closed by the next Submit
	cur     *musterv1.AgentCommand
	round   int
}

func floor(n, size int) error {
	f := &floorServer{n: n, full: make(chan struct{}), release: make(chan struct{})}
	f.msg = padded(size)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// The store's limits on streams per connection, and nothing else.
	s := grpc.NewServer(grpc.MaxConcurrentStreams(4096))
	musterv1.RegisterAgentsServer(s, f)
	musterv1.RegisterJobsServer(s, f)
	say("listening %s", lis.Addr())
	return s.Serve(lis)
}

// padded is an assignment of exactly size bytes on the wire.
func padded(size int) *musterv1.AgentCommand {
	asg := &musterv1.Assignment{JobId: "j-floor", RoundId: "f", Spec: &musterv1.JobSpec{Argv: [][]byte{nil}}}
	cmd := &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Start{Start: asg}}
	for pad := max(size-proto.Size(cmd), 0); ; pad-- {
		asg.Spec.Argv[0] = []byte(strings.Repeat("x", pad))
		if proto.Size(cmd) <= size || pad == 0 {
			return cmd
		}
	}
}

func (f *floorServer) Register(context.Context, *musterv1.RegisterRequest) (*musterv1.RegisterResponse, error) {
	return &musterv1.RegisterResponse{Session: "s"}, nil
}

func (f *floorServer) Submit(context.Context, *musterv1.SubmitRequest) (*musterv1.SubmitResponse, error) {
	<-f.full
	f.mu.Lock()
	defer f.mu.Unlock()
	f.round++
	f.cur = proto.Clone(f.msg).(*musterv1.AgentCommand)
	f.cur.GetStart().RoundId = fmt.Sprintf("f-%d", f.round)
	close(f.release)
	f.release = make(chan struct{})
	return &musterv1.SubmitResponse{JobId: f.cur.GetStart().GetRoundId()}, nil
}

func (f *floorServer) Watch(_ *musterv1.WatchRequest, stream musterv1.Agents_WatchServer) error {
	f.mu.Lock()
	f.streams++
	if f.streams == f.n {
		close(f.full)
	}
	release := f.release
	f.mu.Unlock()
	for {
		select {
		case <-release:
		case <-stream.Context().Done():
			return nil
		}
		f.mu.Lock()
		msg := f.cur
		release = f.release
		f.mu.Unlock()
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
}
