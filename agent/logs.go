package agent

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ranklog"
)

// sendLogs answers a SendLogs command: the job's output this node kept, on a
// PushLogs stream of its own, which ends when everything asked for was
// sent, or when the store stops reading it (its launcher went away).
func (a *Agent) sendLogs(cmd *musterv1.SendLogs) {
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	stream, err := a.client.PushLogs(ctx)
	if err != nil {
		a.log.Info("cannot answer a logs request", zap.String("job", cmd.GetJobId()), zap.Error(err))
		return
	}
	first := &musterv1.PushLogsRequest{Session: a.sessionID(), RequestId: cmd.GetRequestId()}
	if err := stream.Send(first); err != nil {
		return
	}
	// The store answers when it stops reading: a follow then stops too.
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		stream.RecvMsg(&musterv1.PushLogsResponse{})
		cancel()
	}()
	err = a.readKept(ctx, cmd, func(recs []*musterv1.LogRecord) error {
		return stream.Send(&musterv1.PushLogsRequest{Records: recs})
	})
	if err != nil && ctx.Err() == nil {
		note := err.Error()
		if errors.Is(err, ranklog.ErrNotKept) {
			note = "keeps no output of the job (it went with the kept output's age or size bound)"
		}
		stream.Send(&musterv1.PushLogsRequest{Error: validText(note)})
	}
	stream.CloseSend()
	<-answered
}

// readKept sends the records cmd asks for, as the wire carries them.
func (a *Agent) readKept(ctx context.Context, cmd *musterv1.SendLogs, send func([]*musterv1.LogRecord) error) error {
	if a.rankLogs == nil {
		if a.rankLogsErr != nil {
			return fmt.Errorf("keeps no output: %w", a.rankLogsErr)
		}
		return errors.New("keeps no output: its agent runs with --rank-logs none")
	}
	opt := ranklog.ReadOptions{Rank: -1, Tail: -1, Follow: cmd.GetFollow()}
	if cmd.Rank != nil {
		opt.Rank = int(cmd.GetRank())
	}
	if cmd.Tail != nil {
		opt.Tail = int(cmd.GetTail())
	}
	return a.rankLogs.Read(ctx, cmd.GetJobId(), opt, func(rank int, recs []ranklog.Record) error {
		out := make([]*musterv1.LogRecord, len(recs))
		for i, r := range recs {
			out[i] = &musterv1.LogRecord{Rank: int32(rank), Stream: musterv1.Stream(r.Stream), Seq: r.Seq,
				UnixNano: r.UnixNano, Data: r.Data, Paused: r.Paused}
		}
		return send(out)
	})
}
