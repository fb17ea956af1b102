package launch

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// leaderWait bounds how long a submission waits for a replicated store to
// have a leader: an election takes a second or two.
const leaderWait = 15 * time.Second

// submit submits spec to the store's leader. The submission has a name of
// its own, so that one sent again, after a leader was lost with its
// answer, is the same job and never a second one.
func submit(ctx context.Context, c *storeclient.Client, spec *musterv1.JobSpec) (*musterv1.SubmitResponse, error) {
	var b [16]byte
	cryptorand.Read(b[:])
	req := &musterv1.SubmitRequest{Spec: spec, Submission: hex.EncodeToString(b[:])}
	deadline := time.Now().Add(leaderWait)
	delay := 50 * time.Millisecond
	for {
		sub, err := c.Submit(ctx, req)
		if err == nil {
			c.LearnReplicas(sub.GetStoreReplicas())
			return sub, nil
		}
		if leader, refused := storeclient.LeaderOf(err); refused && leader != "" && !c.CanMove() {
			// A replica's socket: this launcher cannot follow it over TCP.
			return nil, fmt.Errorf("this store replica does not lead, and its socket cannot take jobs for the leader: "+
				"give --cluster with the replicas (or the leader, %s), with --tls-ca and the cluster token", leader)
		}
		if !retrySubmit(c, err) || time.Now().After(deadline) {
			return nil, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// retrySubmit says whether a submission that failed with err is worth
// sending again: the store's replicas are electing a leader, a replica is
// down, or the leader was lost before it answered.
func retrySubmit(c *storeclient.Client, err error) bool {
	if _, refused := storeclient.LeaderOf(err); refused {
		return true
	}
	switch status.Code(err) {
	case codes.Aborted:
		return true
	case codes.Unavailable:
		return c.Replicated()
	}
	return false
}
