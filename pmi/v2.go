package pmi

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"
)

// nextV2 reads and answers one PMI-2 frame. A non-nil Result ends the
// connection (abort); an error closes it.
func (s *session) nextV2(ctx context.Context) (*Result, error) {
	body, err := readFrame(s.r)
	if err != nil {
		return nil, err
	}
	c, err := parseV2(body)
	if err != nil {
		return nil, err
	}
	s.log.Debug("pmi request", zap.Int("rank", s.rank), zap.String("cmd", c.name))
	return s.handleV2(ctx, c)
}

// replyV2 answers c with "<cmd>-response" and kv; a threaded client's thrid
// is echoed so that it can match the answer to its request.
func (s *session) replyV2(c command, kv ...string) error {
	if thrid, ok := c.get("thrid"); ok {
		kv = append(kv, "thrid", thrid)
	}
	b, err := formatV2(c.name+"-response", kv...)
	if err != nil {
		// Only a stored value can hold a ';': answer the error instead.
		if b, err = formatV2(c.name+"-response", "rc", "-1", "errmsg", err.Error()); err != nil {
			return err
		}
	}
	return s.write(b)
}

func (s *session) failV2(c command, err error) error {
	return s.replyV2(c, "rc", "-1", "errmsg", err.Error())
}

func boolArg(c command, key string) bool {
	v, _ := c.get(key)
	return v == "TRUE"
}

func (s *session) handleV2(ctx context.Context, c command) (*Result, error) {
	j := s.j
	switch c.name {
	case "fullinit":
		if v, ok := c.get("pmirank"); ok && v != "-1" {
			r, err := strconv.Atoi(v)
			if err == nil {
				err = s.checkRank(r)
			}
			if err != nil {
				return nil, s.failV2(c, fmt.Errorf("pmirank %q: %w", v, err))
			}
		}
		if s.rank < 0 {
			return nil, s.failV2(c, errors.New("no rank: set PMI_RANK or PMI_ID"))
		}
		// Hydra's exact form; spawner-jobid only for spawned jobs.
		return nil, s.replyV2(c, "pmi-version", "2", "pmi-subversion", "0",
			"rank", strconv.Itoa(s.rank), "size", strconv.Itoa(j.Size), "appnum", strconv.Itoa(j.AppNum),
			"debugged", "FALSE", "pmiverbose", "FALSE", "rc", "0")

	case "job-getid":
		return nil, s.replyV2(c, "jobid", j.KVSName, "rc", "0")

	case "kvs-put":
		key, _ := c.get("key")
		value, _ := c.get("value")
		if err := s.put(ctx, key, value); err != nil {
			return nil, s.failV2(c, err)
		}
		return nil, s.replyV2(c, "rc", "0")

	case "kvs-fence":
		if err := j.enterBarrier(ctx); err != nil {
			return nil, err
		}
		return nil, s.replyV2(c, "rc", "0")

	case "kvs-get":
		if id, ok := c.get("jobid"); ok && id != "" && id != j.KVSName {
			return nil, s.failV2(c, fmt.Errorf("jobid %q is not this job's", id))
		}
		key, _ := c.get("key")
		value, found, err := s.get(ctx, key)
		switch {
		case err != nil:
			return nil, s.failV2(c, err)
		case !found:
			return nil, s.replyV2(c, "found", "FALSE", "rc", "0")
		}
		return nil, s.replyV2(c, "found", "TRUE", "value", value, "rc", "0")

	case "info-getjobattr":
		key, _ := c.get("key")
		if value, ok := j.jobAttr(key); ok {
			return nil, s.replyV2(c, "found", "TRUE", "value", value, "rc", "0")
		}
		return nil, s.replyV2(c, "found", "FALSE", "rc", "0")

	case "info-putnodeattr":
		key, _ := c.get("key")
		value, _ := c.get("value")
		err := checkKV(key, value)
		if err == nil {
			err = j.putNodeAttr(key, value)
		}
		if err != nil {
			return nil, s.failV2(c, err)
		}
		return nil, s.replyV2(c, "rc", "0")

	case "info-getnodeattr":
		key, _ := c.get("key")
		if err := checkKV(key, ""); err != nil {
			return nil, s.failV2(c, err)
		}
		value, found, err := j.nodeAttr(ctx, key, boolArg(c, "wait"))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, s.replyV2(c, "found", "FALSE", "rc", "0")
		}
		return nil, s.replyV2(c, "found", "TRUE", "value", value, "rc", "0")

	case "finalize":
		s.finalized = true
		return nil, s.replyV2(c, "rc", "0")

	case "abort":
		// MPICH's PMI-2 client sends no exit code: such an abort exits 1.
		code, err := intArg(c, "exitcode")
		if err != nil {
			code = 1
		}
		msg, ok := c.get("message")
		if !ok {
			msg, _ = c.get("msg")
		}
		return s.abort(code, msg), nil

	case "spawn", "name-publish", "name-unpublish", "name-lookup":
		return nil, s.failV2(c, errors.New(unsupported(c.name)))
	}
	return nil, s.failV2(c, fmt.Errorf("unknown command %q", c.name))
}
