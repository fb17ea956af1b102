package pmi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// nextV1 reads and answers one PMI-1 line. A non-nil Result ends the
// connection (abort); an error closes it.
func (s *session) nextV1(ctx context.Context) (*Result, error) {
	line, err := readLine(s.r)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(line, "mcmd=") {
		return nil, s.spawnV1(line)
	}
	c, err := parseV1(line)
	if err != nil {
		return nil, err
	}
	s.log.Debug("pmi request", zap.Int("rank", s.rank), zap.String("cmd", c.name))
	return s.handleV1(ctx, c)
}

func (s *session) replyV1(name string, kv ...string) error {
	b, err := formatV1(name, kv...)
	if err != nil {
		return err
	}
	return s.write(b)
}

func (s *session) handleV1(ctx context.Context, c command) (*Result, error) {
	j := s.j
	switch c.name {
	case "initack":
		id, err := intArg(c, "pmiid")
		if err != nil {
			return nil, err
		}
		if err := s.checkRank(id); err != nil {
			return nil, err
		}
		// Four lines, as a PMI_PORT client reads them.
		return nil, s.write(fmt.Appendf(nil, "cmd=initack\ncmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n", j.Size, s.rank))

	case "init":
		v, err := intArg(c, "pmi_version")
		if err != nil {
			return nil, err
		}
		sub, err := intArg(c, "pmi_subversion")
		if err != nil {
			return nil, err
		}
		switch {
		case v == 2 && sub == 0:
			// The rest of the connection is framed as PMI-2.
			s.v2 = true
			return nil, s.replyV1("response_to_init", "pmi_version", "2", "pmi_subversion", "0", "rc", "0")
		case v == 1 && sub >= 0:
			// 1.0 and 1.1 are served as asked; a newer 1.x client gets 1.1
			// and so does not use 1.2's group barriers.
			return nil, s.replyV1("response_to_init", "pmi_version", "1", "pmi_subversion", strconv.Itoa(min(sub, 1)), "rc", "0")
		default:
			return nil, s.replyV1("response_to_init", "pmi_version", "1", "pmi_subversion", "1", "rc", "-1")
		}

	case "get_maxes":
		return nil, s.replyV1("maxes", "kvsname_max", strconv.Itoa(maxKVSName),
			"keylen_max", strconv.Itoa(maxKey), "vallen_max", strconv.Itoa(maxValue))
	case "get_appnum":
		return nil, s.replyV1("appnum", "appnum", strconv.Itoa(j.AppNum))
	case "get_my_kvsname":
		return nil, s.replyV1("my_kvsname", "kvsname", j.KVSName)
	case "get_universe_size":
		return nil, s.replyV1("universe_size", "size", strconv.Itoa(j.Size))

	case "put":
		err := s.checkKVSName(c)
		if err == nil {
			key, _ := c.get("key")
			value, _ := c.get("value")
			err = s.put(ctx, key, value)
		}
		if err != nil {
			return nil, s.replyV1("put_result", "rc", "-1", "msg", wireMsg(err))
		}
		return nil, s.replyV1("put_result", "rc", "0", "msg", "success")

	case "get":
		err := s.checkKVSName(c)
		var value string
		var found bool
		if err == nil {
			key, _ := c.get("key")
			value, found, err = s.get(ctx, key)
			if err == nil && !found {
				err = fmt.Errorf("key %s not found", key)
			}
		}
		if err == nil {
			// A value no v1 line can carry (put through PMI-2) is an error reply.
			var b []byte
			if b, err = formatV1("get_result", "rc", "0", "msg", "success", "value", value); err == nil {
				return nil, s.write(b)
			}
		}
		return nil, s.replyV1("get_result", "rc", "-1", "msg", wireMsg(err))

	case "barrier_in":
		if g, ok := c.get("group"); ok {
			return nil, fmt.Errorf("barrier_in group=%s: group barriers (PMI 1.2) are not offered", g)
		}
		if err := j.enterBarrier(ctx); err != nil {
			return nil, err
		}
		return nil, s.replyV1("barrier_out")

	case "finalize":
		s.finalized = true
		return nil, s.replyV1("finalize_ack")

	case "abort":
		code, err := intArg(c, "exitcode")
		if err != nil {
			code = 1
		}
		msg, _ := c.get("message")
		return s.abort(code, msg), nil

	case "publish_name", "unpublish_name", "lookup_name":
		name := strings.TrimSuffix(c.name, "_name") + "_result"
		return nil, s.replyV1(name, "rc", "-1", "msg", wireMsg(errors.New(unsupported(c.name))))
	}
	// No reply names an unknown command: the client would wait forever.
	return nil, fmt.Errorf("unknown command %q", c.name)
}

func (s *session) checkKVSName(c command) error {
	if name, _ := c.get("kvsname"); name != s.j.KVSName {
		return fmt.Errorf("kvsname %q is not this job's", name)
	}
	return nil
}

// spawnV1 reads one "mcmd=spawn" block up to "endcmd" and, after the last
// block of a spawn (spawnssofar = totspawns), refuses it.
func (s *session) spawnV1(first string) error {
	if first != "mcmd=spawn" {
		return fmt.Errorf("unknown multi-line command %q", first)
	}
	var tot, sofar string
	for n := 0; ; n++ {
		if n == maxMcmdLines {
			return fmt.Errorf("spawn block longer than %d lines", maxMcmdLines)
		}
		line, err := readLine(s.r)
		if err != nil {
			return err
		}
		if line == "endcmd" {
			break
		}
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "totspawns":
			tot = v
		case "spawnssofar":
			sofar = v
		}
	}
	if tot != "" && sofar != "" && tot != sofar {
		return nil // more blocks follow; one reply answers them all
	}
	return s.replyV1("spawn_result", "rc", "-1", "msg", wireMsg(errors.New(unsupported("spawn"))))
}

// intArg reads a decimal argument that must be there.
func intArg(c command, key string) (int, error) {
	v, ok := c.get(key)
	if !ok {
		return 0, fmt.Errorf("%s without %s", c.name, key)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1<<31 || n > 1<<31-1 {
		return 0, fmt.Errorf("%s: %s=%q is not an integer", c.name, key, v)
	}
	return n, nil
}
