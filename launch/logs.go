package launch

import (
	"context"
	"errors"
	"fmt"
	"io"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// ErrLogsIncomplete says some node's part of a job's output was missing;
// each node was named on stderr with why.
var ErrLogsIncomplete = errors.New("some of the job's output could not be read")

// Logs prints a job's kept output as the store relays it from the job's
// nodes: stdout lines to out, stderr lines to errw, each line tagged with
// its rank when tag is set. A note about a node goes to errw, and makes it
// return ErrLogsIncomplete once the rest is printed.
func Logs(ctx context.Context, jobs musterv1.JobsClient, req *musterv1.LogsRequest, out, errw io.Writer, tag bool) error {
	stream, err := jobs.Logs(ctx, req)
	if err != nil {
		return err
	}
	p := NewPrinter(out, errw, tag)
	incomplete := false
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			p.Close()
			return err
		}
		for _, r := range resp.GetRecords() {
			p.Output(&musterv1.Output{Rank: r.GetRank(), Stream: r.GetStream(), Data: r.GetData(), Paused: r.GetPaused()})
		}
		if note := resp.GetNote(); note != "" {
			p.Flush()
			fmt.Fprintf(errw, "muster: node %s: %s\n", resp.GetNode(), note)
			incomplete = true
		}
		// A follower sees each batch as it comes.
		if req.GetFollow() {
			p.Flush()
		}
		if err := p.Err(); err != nil {
			return err
		}
	}
	p.Close()
	if err := p.Err(); err != nil {
		return err
	}
	if incomplete {
		return ErrLogsIncomplete
	}
	return nil
}
