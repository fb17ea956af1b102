package agent

import (
	"context"
	"fmt"

	"github.com/musterhq/muster/envprop"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// openStdin makes the pipes of the local ranks that read the launcher's
// stdin and feeds them from the store.
func (js *jobStart) openStdin() error {
	a, asg := js.a, js.asg
	in := envprop.Input{NodeRank: int(asg.GetNodeRank()), NProc: int(asg.GetNproc())}
	ranks := map[int]int{}
	for l := 0; l < int(asg.GetNproc()); l++ {
		in.LocalRank = l
		ranks[l] = in.Rank()
	}
	feed, err := newStdinFeed(a.log, asg.GetSpec(), ranks)
	if err != nil {
		return fmt.Errorf("stdin pipes: %w", err)
	}
	js.files.feed = feed
	feed.start(func(ctx context.Context) (musterv1.Agents_ReadStdinClient, error) {
		return a.client.ReadStdin(ctx, &musterv1.ReadStdinRequest{Session: a.sessionID(), JobId: asg.GetJobId()})
	})
	return nil
}

func (js *jobStart) closeStdin() { js.files.feed.close() }
