package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"go.uber.org/zap"
)

// ErrNotFinalized is in a Result's Err when the rank closed its connection
// (exited, most likely) without finalize: it did not end MPI cleanly.
var ErrNotFinalized = errors.New("closed its PMI connection before finalize")

// session is one rank's connection.
type session struct {
	j         *Job
	conn      net.Conn
	r         *bufio.Reader
	log       *zap.Logger
	rank      int
	v2        bool // switched to PMI-2 framing by init pmi_version=2
	puts      int
	finalized bool
	spoke     bool // a command was served
}

// Serve serves one rank's connection until it closes, and closes it. rank
// is the rank when the agent knows it (PMI_FD), else -1 and the client names
// it in initack or fullinit (PMI_PORT). When ctx ends, the connection is
// closed and any wait ends. The Result says how the rank ended.
func (j *Job) Serve(ctx context.Context, conn net.Conn, rank int) Result {
	defer conn.Close()
	if err := j.check(); err != nil {
		return Result{Rank: rank, Err: err}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	s := &session{j: j, conn: conn, r: bufio.NewReaderSize(conn, maxLine), log: j.logger(), rank: rank}
	res := s.run(ctx)
	res.Rank = s.rank
	if res.Err != nil && ctx.Err() != nil {
		res.Err = fmt.Errorf("%w: %w", ctx.Err(), res.Err)
	}
	return res
}

func (s *session) run(ctx context.Context) Result {
	for {
		var res *Result
		var err error
		if s.v2 {
			res, err = s.nextV2(ctx)
		} else {
			res, err = s.nextV1(ctx)
		}
		switch {
		case res != nil:
			res.Spoke = true
			return *res
		case err == nil:
			s.spoke = true
		case errors.Is(err, io.EOF) && s.finalized:
			return Result{Finalized: true, Spoke: true}
		case errors.Is(err, io.EOF):
			return Result{Spoke: s.spoke, Err: fmt.Errorf("rank %d %w", s.rank, ErrNotFinalized)}
		case err != nil:
			s.log.Info("pmi connection closed", zap.Int("rank", s.rank), zap.Error(err))
			return Result{Finalized: s.finalized, Spoke: s.spoke, Err: fmt.Errorf("rank %d: pmi: %w", s.rank, err)}
		}
	}
}

func (s *session) write(b []byte) error {
	_, err := s.conn.Write(b)
	return err
}

// put stores one key for the job, within the bounds get_maxes announced.
func (s *session) put(ctx context.Context, key, value string) error {
	if err := checkKV(key, value); err != nil {
		return err
	}
	if err := s.j.countPut(s.puts); err != nil {
		return err
	}
	s.puts++
	return s.j.Backend.Put(ctx, key, []byte(value))
}

// get reads one key of the job; PMI_process_mapping is answered here.
func (s *session) get(ctx context.Context, key string) (string, bool, error) {
	if err := checkKV(key, ""); err != nil {
		return "", false, err
	}
	if key == "PMI_process_mapping" && s.j.Mapping != "" {
		return s.j.Mapping, true, nil
	}
	v, ok, err := s.j.Backend.Get(ctx, key)
	return string(v), ok, err
}

// abort is the Result of an abort request.
func (s *session) abort(code int, msg string) *Result {
	text := fmt.Sprintf("rank %d called abort with exit code %d", s.rank, code)
	if msg != "" {
		text += ": " + msg
	}
	s.log.Info("pmi abort", zap.Int("rank", s.rank), zap.Int("exit-code", code), zap.String("message", msg))
	return &Result{Aborted: true, ExitCode: code, Message: text}
}

// unsupported names what this server does not offer (spawn, name service).
func unsupported(cmd string) string { return cmd + " is not supported by this process manager" }

// checkRank checks a rank a client names against the job and the rank the
// agent gave, and adopts it when the agent gave none.
func (s *session) checkRank(r int) error {
	switch {
	case r < 0 || r >= s.j.Size:
		return fmt.Errorf("rank %d is outside 0..%d", r, s.j.Size-1)
	case s.rank >= 0 && r != s.rank:
		return fmt.Errorf("rank %d on the connection of rank %d", r, s.rank)
	}
	s.rank = r
	return nil
}

// wireMsg makes an error text one token that MPICH 4.0.2's parser, which
// knows no escapes, reads whole.
func wireMsg(err error) string {
	return strings.NewReplacer(" ", "_", "\\", "/", "\n", "_").Replace(err.Error())
}
