package hostfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxFileSize bounds a hostfile read whole, as ParseAuto and ReadFile do.
const MaxFileSize = 64 << 20

// Parse reads a hostfile of format f; name appears in errors ("hosts.txt:3: ...").
func Parse(name string, r io.Reader, f Format) ([]Host, error) {
	switch f {
	case OpenMPI:
		return parseOpenMPI(name, r)
	case MPICH:
		return parseMPICH(name, r)
	case DeepSpeed:
		return parseDeepSpeed(name, r)
	}
	return nil, fmt.Errorf("hostfile: unknown format %q (want openmpi, mpich or deepspeed)", f)
}

// ParseAuto detects the format of a hostfile, then parses it. See Detect.
func ParseAuto(name string, r io.Reader) ([]Host, Format, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > MaxFileSize {
		return nil, "", &ParseError{Name: name, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize)}
	}
	f := Detect(data)
	hosts, err := Parse(name, bytes.NewReader(data), f)
	return hosts, f, err
}

// ReadFile reads the hostfile at path, detecting its format.
func ReadFile(path string) ([]Host, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	hosts, _, err := ParseAuto(path, file)
	return hosts, err
}

// Detect guesses the format of a hostfile from its lines, comments removed:
//   - MPICH when a line's first word has the form host:N (an IPv6 address
//     does not count);
//   - DeepSpeed when every line is exactly "host slots=N", without user@, and
//     the file has no '//' or '/*' comments (DeepSpeed refuses a repeated host; so does
//     Open MPI 5 when both lines give slots);
//   - Open MPI otherwise; a plain list of names is read as Open MPI, whose
//     grammar holds the other two.
func Detect(data []byte) Format {
	deepspeed, seen := true, false
	for _, line := range uncomment(string(data)) {
		if line.slashed {
			deepspeed = false
		}
		f := strings.Fields(line.text)
		if len(f) == 0 {
			continue
		}
		seen = true
		if strings.Contains(f[0], ":") && !strings.Contains(line.text, "=") && !isIPv6(f[0]) {
			return MPICH
		}
		if len(f) != 2 || !strings.HasPrefix(f[1], "slots=") || strings.Contains(f[0], "@") {
			deepspeed = false
		}
	}
	if seen && deepspeed {
		return DeepSpeed
	}
	return OpenMPI
}

// codeLine is the text of a line outside comments; slashed tells whether the
// line had a '//' or '/*' comment.
type codeLine struct {
	text    string
	slashed bool
}

// uncomment drops '#', '//' and '/* */' comments the way Open MPI does, a
// block comment splitting the line it is on.
func uncomment(s string) []codeLine {
	var out []codeLine
	inComment := false
	for _, rest := range strings.Split(s, "\n") {
		slashed := inComment
		for rest != "" {
			if inComment {
				i := strings.Index(rest, "*/")
				if i < 0 {
					break
				}
				rest, inComment = rest[i+2:], false
				continue
			}
			i, kind := commentStart(rest)
			if i < 0 {
				out = append(out, codeLine{rest, slashed})
				break
			}
			slashed = slashed || kind != "#"
			out = append(out, codeLine{rest[:i], slashed})
			if kind != "/*" {
				break
			}
			rest, inComment = rest[i+2:], true
		}
		if slashed {
			out = append(out, codeLine{"", true})
		}
	}
	return out
}
