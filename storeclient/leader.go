package storeclient

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// A replicated store's replicas refuse what only its leader takes, naming
// the leader (LeaderOf). A client that can move follows: a call refused by
// a replica that named the leader is made again there, at once; one refused
// while no replica leads, or by a replica that cannot be reached, moves
// the client to the next replica for the caller's next try.

// maxLeaderHops bounds how often one call follows a named leader.
const maxLeaderHops = 3

// MaxReplicas bounds the replica list a store hands its clients.
const MaxReplicas = 16

type leaderState struct {
	moves    *manual.Resolver
	mu       sync.Mutex
	addr     string        // where calls go now
	replicas []string      // the store's replicas, when known
	moved    chan struct{} // closed and replaced when addr changes
}

func (l *leaderState) move(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr == l.addr {
		return
	}
	l.addr = addr
	l.moves.UpdateState(storeState(addr))
	close(l.moved)
	l.moved = make(chan struct{})
}

// Moved is closed when the client's calls go elsewhere from now on: a
// stream open at the old address may hang there (gRPC lets a connection it
// leaves finish its streams), and its owner should open it again. Never
// closed for a client that cannot move.
func (c *Client) Moved() <-chan struct{} {
	if c.leader == nil {
		return nil
	}
	c.leader.mu.Lock()
	defer c.leader.mu.Unlock()
	return c.leader.moved
}

func (l *leaderState) now() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// next is the replica after the current one.
func (l *leaderState) next() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.replicas) < 2 {
		return l.addr
	}
	i := slices.Index(l.replicas, l.addr)
	return l.replicas[(i+1)%len(l.replicas)]
}

func (l *leaderState) learn(replicas []string) {
	if len(replicas) == 0 || len(replicas) > MaxReplicas {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replicas = slices.Clone(replicas)
}

func (l *leaderState) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	for hop := 0; ; hop++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		l.afterCall(err)
		leader, refused := LeaderOf(err)
		if !refused || leader == "" || hop == maxLeaderHops || ctx.Err() != nil {
			return err
		}
	}
}

// afterCall moves the client where the next call should go, after err.
func (l *leaderState) afterCall(err error) {
	leader, refused := LeaderOf(err)
	switch {
	case refused && leader != "":
		l.move(leader)
	case refused || status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded:
		// A replica down, or cut off; one that lives and does not lead
		// names the leader on the next call.
		l.move(l.next())
	}
}

// FollowLeader moves the client where its next call should go after a
// call (a stream's, say) ended with err: to the leader a replica named, or
// to the next replica. A client that cannot move stays.
func (c *Client) FollowLeader(err error) {
	if c.leader != nil {
		c.leader.afterCall(err)
	}
}

// LearnReplicas tells the client a replicated store's replicas, as the
// store listed them.
func (c *Client) LearnReplicas(replicas []string) {
	if c.leader != nil {
		c.leader.learn(replicas)
	}
}

// CanMove says whether the client can follow a store to another address:
// over TCP, not over a Unix socket.
func (c *Client) CanMove() bool { return c.leader != nil }

// Replicated says whether the client knows of more than one replica.
func (c *Client) Replicated() bool {
	if c.leader == nil {
		return false
	}
	c.leader.mu.Lock()
	defer c.leader.mu.Unlock()
	return len(c.leader.replicas) > 1
}

// StoreAddr is where the client's calls go now.
func (c *Client) StoreAddr() string {
	if c.leader == nil {
		return ""
	}
	return c.leader.now()
}

// stream opens a stream; a server-streaming call a replica refused before
// its first message is opened again at the leader it named, with the same
// request, as a unary call is made again (unary).
func (l *leaderState) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		l.afterCall(err)
		return nil, err
	}
	if desc.ClientStreams {
		return cs, nil
	}
	return &leaderStream{ClientStream: cs, l: l, open: func() (grpc.ClientStream, error) {
		return streamer(ctx, desc, cc, method, opts...)
	}}, nil
}

// leaderStream is a server-streaming call that follows the leader until
// its first message comes.
type leaderStream struct {
	grpc.ClientStream
	l        *leaderState
	open     func() (grpc.ClientStream, error)
	req      any
	received bool
}

func (s *leaderStream) SendMsg(m any) error {
	s.req = m
	return s.ClientStream.SendMsg(m)
}

func (s *leaderStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	for hop := 0; err != nil && !s.received && s.req != nil && hop < maxLeaderHops; hop++ {
		leader, refused := LeaderOf(err)
		if !refused || leader == "" {
			break
		}
		s.l.move(leader)
		cs, oerr := s.open()
		if oerr != nil {
			return oerr
		}
		if oerr := cs.SendMsg(s.req); oerr != nil {
			return oerr
		}
		if oerr := cs.CloseSend(); oerr != nil {
			return oerr
		}
		s.ClientStream = cs
		err = cs.RecvMsg(m)
	}
	if err == nil {
		s.received = true
	}
	return err
}
