package launch

import (
	"cmp"
	"io"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// TerminalRequest is what decides whether a job's workers get
// pseudo-terminals (--tty) and what they see of the launcher's.
type TerminalRequest struct {
	// Asked is --tty's value when given; nil leaves it to the default.
	Asked *bool
	// Stdout and Stderr are where the launcher prints the workers' output.
	Stdout, Stderr io.Writer
	// Embedded: the job runs on the embedded default.
	Embedded bool
	// World is the job's number of ranks (its most, for an elastic job).
	World int64
	// OutputRanks are --output-ranks' ranges; none for every rank.
	OutputRanks [][2]int32
	// LogDir: --log-dir was given.
	LogDir bool
	// Tag and Timestamp say what the launcher puts before each line.
	Tag, Timestamp bool
	// Term is the launcher's TERM.
	Term string
}

// timestampWidth is how wide --timestamp-output's prefix is.
const timestampWidth = len("2006-01-02T15:04:05.000Z ")

// Terminal returns the job's Terminal, nil for pipes, and a line for the
// launcher to print when --tty was asked for and cannot be had.
//
// With --tty, the ranks whose output is printed get a pseudo-terminal for
// stdout, and for stderr too when the launcher's stderr is a terminal, if
// the launcher's stdout is a terminal; if it is not, the job runs with
// pipes and a note says so. Without --tty or --no-tty, they get them when
// the launcher's stdout is a terminal, the job runs on the embedded default,
// exactly one rank's output is printed and there is no --log-dir: one
// process on one's own terminal, torchrun's case, whose progress bars and
// colours then show as under torchrun, while many ranks' cursor movements on
// one terminal, and log files full of escape sequences, stay opt-in.
func Terminal(req TerminalRequest) (*musterv1.Terminal, string) {
	out, ok := terminalFile(req.Stdout)
	printed := printedRanks(req.World, req.OutputRanks)
	switch {
	case req.Asked != nil && !*req.Asked:
		return nil, ""
	case req.Asked != nil && !ok:
		return nil, "muster: --tty: stdout is not a terminal: the workers' output stays on pipes"
	case req.Asked == nil && (!ok || !req.Embedded || printed != 1 || req.LogDir):
		return nil, ""
	}
	if printed == 0 {
		return nil, ""
	}
	t := &musterv1.Terminal{Stdout: true, Term: termOrEmpty(req.Term)}
	_, t.Stderr = terminalFile(req.Stderr)
	if ws, err := unix.IoctlGetWinsize(int(out.Fd()), unix.TIOCGWINSZ); err == nil {
		// A full-width bar must fit after the line's prefix, or every
		// redraw wraps onto a new line.
		t.Rows, t.Cols = uint32(ws.Row), uint32(ws.Col)
		if t.Cols > 0 {
			t.Cols = uint32(max(int(t.Cols)-prefixWidth(req), 1))
		}
	}
	for _, sp := range req.OutputRanks {
		t.Ranks = append(t.Ranks, &musterv1.RankSpan{First: sp[0], Last: sp[1]})
	}
	return t, ""
}

// terminalFile returns w as a file when it is a terminal.
func terminalFile(w io.Writer) (*os.File, bool) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil, false
	}
	return f, true
}

// termOrEmpty is TERM as a spec takes it: a terminal type's name, else "".
func termOrEmpty(term string) string {
	if len(term) == 0 || len(term) > 128 {
		return ""
	}
	for i := 0; i < len(term); i++ {
		c := term[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && (c == '.' || c == '_' || c == '+' || c == '-'))
		if !ok {
			return ""
		}
	}
	return term
}

// printedRanks counts the ranks below world whose output is printed.
func printedRanks(world int64, spans [][2]int32) int64 {
	if len(spans) == 0 {
		return world
	}
	sorted := slices.Clone(spans)
	slices.SortFunc(sorted, func(a, b [2]int32) int { return cmp.Compare(a[0], b[0]) })
	var n int64
	next := int64(0) // the first rank not counted yet
	for _, sp := range sorted {
		lo, hi := max(int64(sp[0]), next), min(int64(sp[1]), world-1)
		if lo <= hi {
			n += hi - lo + 1
			next = hi + 1
		}
	}
	return n
}

// prefixWidth is the widest prefix the launcher puts before a printed line:
// the timestamp and the tag of the highest printed rank.
func prefixWidth(req TerminalRequest) int {
	w := 0
	if req.Timestamp {
		w += timestampWidth
	}
	if req.Tag {
		top := req.World - 1
		if len(req.OutputRanks) > 0 {
			top = 0
			for _, sp := range req.OutputRanks {
				top = max(top, min(int64(sp[1]), req.World-1))
			}
		}
		w += len("[" + strconv.FormatInt(top, 10) + "] ")
	}
	return w
}
