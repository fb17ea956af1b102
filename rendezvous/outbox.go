package rendezvous

import (
	"sync"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// maxPending bounds a node's unsent commands. Commands coalesce (a job is
// stopped once per node, with the shortest grace asked for), so only an
// agent that has not read its stream through hundreds of jobs reaches it;
// that agent alone is then removed, never another.
const maxPending = 4096

// outbox holds the commands a node's Watch stream has yet to send. It has a
// lock of its own: the stream drains it without the store's lock, and one
// node's slow stream never holds up the others.
type outbox struct {
	mu   sync.Mutex
	cmds []*musterv1.AgentCommand
	wake chan struct{} // has a token when cmds may be non-empty
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

// Wake has a token when commands may be waiting: the stream then calls Take.
func (o *outbox) Wake() <-chan struct{} { return o.wake }

// push queues cmd, coalescing a stop with an unsent stop of the same job.
// It reports false when the node has maxPending commands unsent.
func (o *outbox) push(cmd *musterv1.AgentCommand) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st := cmd.GetStop(); st != nil {
		for _, c := range o.cmds {
			if prev := c.GetStop(); prev != nil && prev.GetJobId() == st.GetJobId() {
				if st.GetKillTimeoutMs() < prev.GetKillTimeoutMs() {
					prev.KillTimeoutMs = st.GetKillTimeoutMs()
				}
				return true
			}
		}
	}
	if len(o.cmds) >= maxPending {
		return false
	}
	o.cmds = append(o.cmds, cmd)
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return true
}

// Take returns and clears the unsent commands, oldest first.
func (o *outbox) Take() []*musterv1.AgentCommand {
	o.mu.Lock()
	defer o.mu.Unlock()
	cmds := o.cmds
	o.cmds = nil
	return cmds
}

// each calls fn for every unsent command, oldest first, leaving them queued.
func (o *outbox) each(fn func(*musterv1.AgentCommand)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.cmds {
		fn(c)
	}
}

// Requeue puts back commands a broken stream did not send, before any
// queued since.
func (o *outbox) Requeue(cmds []*musterv1.AgentCommand) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cmds = append(append([]*musterv1.AgentCommand(nil), cmds...), o.cmds...)
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
