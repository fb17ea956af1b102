package launch

import (
	"context"
	"errors"
	"fmt"

	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/listing"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/topology"
)

// reportBinding prints a started worker's binding, and first, once for
// its node, why the node gives none.
func (f *follower) reportBinding(ctx context.Context, s *musterv1.WorkerStarted) {
	f.flush(ctx)
	if why := listing.BindingUnknown(s); why != "" && !f.unknownTold[s.GetNode()] {
		if f.unknownTold == nil {
			f.unknownTold = map[string]bool{}
		}
		if len(f.unknownTold) < jobspec.MaxNodes {
			f.unknownTold[s.GetNode()] = true
		}
		fmt.Fprintln(f.opts.Stderr, "muster: "+why)
	}
	fmt.Fprintln(f.opts.Stderr, "muster: "+listing.BindingLine(s))
}

// ParseCPUBind parses --cpu-bind (or torchrun's --numa-binding) into the
// mode a job spec carries: "" for none. An empty value is refused: an unset
// variable in a script would otherwise run the job unbound unnoticed.
func ParseCPUBind(s string) (string, error) {
	if s == "" {
		return "", errors.New("an empty mode: want none, numa, socket or cores")
	}
	m, err := topology.ParseMode(s)
	if err != nil || m == topology.BindNone {
		return "", err
	}
	return string(m), nil
}
