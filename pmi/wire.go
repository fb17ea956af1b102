package pmi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Bounds on what a client may send; every read is bounded by them.
const (
	// maxLine is MPICH 4.0.2's PMIU_MAXLINE: its client never writes a longer
	// line, newline included.
	maxLine = 1024
	// maxFrame bounds a PMI-2 frame's body; the 6-digit header allows
	// 999999, far more than any command with a 1024-byte value needs.
	maxFrame = 16 << 10
	// maxMcmdLines bounds one "mcmd=spawn … endcmd" block.
	maxMcmdLines = 256
	// Hydra's get_maxes answer, enforced on put and get.
	maxKVSName = 256
	maxKey     = 64
	maxValue   = 1024
)

// errTooLong is a line or frame over its bound: the connection is closed.
var errTooLong = errors.New("too long")

// command is one parsed request: its name and its key=value tokens in order.
type command struct {
	name string
	args []token
}

type token struct{ key, value string }

// get returns the first value of key, and whether it was there.
func (c command) get(key string) (string, bool) {
	for _, t := range c.args {
		if t.key == key {
			return t.value, true
		}
	}
	return "", false
}

func isKeyByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
		b == '_' || b == '-' || b == '/'
}

// readLine reads one v1 line without its '\n', at most maxLine bytes in all.
// r must buffer at least maxLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || len(line) > maxLine:
		return "", fmt.Errorf("line longer than %d bytes: %w", maxLine, errTooLong)
	case err == io.EOF && len(line) > 0:
		return "", io.ErrUnexpectedEOF
	case err != nil:
		return "", err
	}
	return string(line[:len(line)-1]), nil
}

// parseV1 parses "cmd=<name> key=value …" as MPICH's newer parser does:
// tokens split on spaces, keys of [A-Za-z0-9_/-], a key may stand alone, and
// in a value a backslash takes the next byte literally ("a\ b" is "a b").
func parseV1(line string) (command, error) {
	var c command
	if !strings.HasPrefix(line, "cmd=") {
		return c, errors.New("line does not start with cmd=")
	}
	haveCmd := false
	for i := 0; i < len(line); {
		if line[i] == ' ' {
			i++
			continue
		}
		start := i
		for i < len(line) && isKeyByte(line[i]) {
			i++
		}
		if i == start {
			return c, fmt.Errorf("expected a key at byte %d, got %q", i, line[i])
		}
		key := line[start:i]
		var value string
		switch {
		case i == len(line) || line[i] == ' ':
		case line[i] == '=':
			i++
			var b strings.Builder
			for i < len(line) && line[i] != ' ' {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				b.WriteByte(line[i])
				i++
			}
			value = b.String()
		default:
			return c, fmt.Errorf("unexpected %q after key %q", line[i], key)
		}
		if key == "cmd" && !haveCmd {
			c.name, haveCmd = value, true
			continue
		}
		c.args = append(c.args, token{key, value})
	}
	if c.name == "" {
		return c, errors.New("empty command name")
	}
	return c, nil
}

// escapeV1 makes value one v1 token that MPICH's newer parser reads back
// as value: spaces and backslashes get a backslash.
func escapeV1(value string) string {
	if !strings.ContainsAny(value, ` \`) {
		return value
	}
	var b strings.Builder
	for i := 0; i < len(value); i++ {
		if value[i] == ' ' || value[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(value[i])
	}
	return b.String()
}

// formatV1 writes "cmd=<name> k=v …\n"; values are escaped, and a value
// holding a newline or NUL (which no v1 line can carry) is an error.
func formatV1(name string, kv ...string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("cmd=")
	b.WriteString(name)
	for i := 0; i+1 < len(kv); i += 2 {
		if strings.ContainsAny(kv[i+1], "\n\x00") {
			return nil, fmt.Errorf("value of %s holds a newline or NUL", kv[i])
		}
		b.WriteByte(' ')
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(escapeV1(kv[i+1]))
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// readFrame reads one PMI-2 frame: 6 ASCII bytes of decimal length (space
// padded, as "%6u" writes it), then that many bytes of body.
func readFrame(r io.Reader) (string, error) {
	var hdr [6]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimLeft(string(hdr[:]), " "))
	if err != nil || n < 0 {
		return "", fmt.Errorf("bad frame length %q", hdr[:])
	}
	if n > maxFrame {
		return "", fmt.Errorf("frame of %d bytes, more than %d: %w", n, maxFrame, errTooLong)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	return string(body), nil
}

// parseV2 parses "cmd=<name>;key=value;…": ';' ends a value, nothing is
// escaped, the last ';' may be missing.
func parseV2(body string) (command, error) {
	var c command
	if !strings.HasPrefix(body, "cmd=") {
		return c, errors.New("frame does not start with cmd=")
	}
	for _, f := range strings.Split(body, ";") {
		if f == "" {
			continue
		}
		key, value, _ := strings.Cut(f, "=")
		if key == "" {
			return c, fmt.Errorf("empty key in %q", f)
		}
		for i := 0; i < len(key); i++ {
			if !isKeyByte(key[i]) {
				return c, fmt.Errorf("unexpected %q in key %q", key[i], key)
			}
		}
		if key == "cmd" && c.name == "" {
			c.name = value
			continue
		}
		c.args = append(c.args, token{key, value})
	}
	if c.name == "" {
		return c, errors.New("empty command name")
	}
	return c, nil
}

// formatV2 writes one frame "%6d" + "cmd=<name>;k=v;…;". A value holding ';'
// cannot be framed and is an error.
func formatV2(name string, kv ...string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("      cmd=")
	b.WriteString(name)
	b.WriteByte(';')
	for i := 0; i+1 < len(kv); i += 2 {
		if strings.ContainsRune(kv[i+1], ';') {
			return nil, fmt.Errorf("value of %s holds a ';'", kv[i])
		}
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(kv[i+1])
		b.WriteByte(';')
	}
	out := b.Bytes()
	n := len(out) - 6
	if n > 999999 {
		return nil, fmt.Errorf("frame of %d bytes does not fit its header", n)
	}
	copy(out, fmt.Sprintf("%6d", n))
	return out, nil
}
