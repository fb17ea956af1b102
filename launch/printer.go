package launch

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Printer bounds: how much it gathers before writing, and how much of a
// long unfinished line it holds back before showing it anyway.
const (
	flushBytes   = 64 << 10
	maxHeldBytes = 1 << 20
)

// Printer writes workers' output tagged with their rank. Lines of different
// ranks never mix: a line is written whole, except one that a worker left
// unfinished for a while (a progress bar), which shows as it is. On a
// terminal, that unfinished line is cleared when another rank writes and
// shown again after; elsewhere only pieces drawn with \r show early (a
// worker merely slow to finish a line must not cost a pipe or file a whole
// line), ended by a newline when another rank writes.
type Printer struct {
	tag     bool
	streams [2]*printStream
	// only, when set, says which ranks' output is printed.
	only func(rank int32) bool
	// now, when set, stamps each line with the time its output arrived.
	now func() time.Time
}

type printStream struct {
	w      io.Writer
	tty    bool
	buf    bytes.Buffer
	held   map[int32][]byte // unfinished lines not shown yet, by rank
	open   int32            // the rank whose unfinished line is shown, or -1
	shown  []byte           // what of that line is shown, to show it again
	tagDue bool             // that line ended its last piece with a \r: its next drawing is tagged
	err    error            // the first write error
}

// NewPrinter returns a printer writing stdout lines to out and stderr lines
// to errw; tag prefixes each line with "[rank] ".
func NewPrinter(out, errw io.Writer, tag bool) *Printer {
	p := &Printer{tag: tag}
	for i, w := range []io.Writer{out, errw} {
		p.streams[i] = &printStream{w: w, tty: isTerminal(w), held: map[int32][]byte{}, open: -1}
	}
	return p
}

// Output adds one output event.
func (p *Printer) Output(o *musterv1.Output) {
	st := p.streams[0]
	if o.GetStream() == musterv1.Stream_STREAM_STDERR {
		st = p.streams[1]
	}
	rank, data := o.GetRank(), o.GetData()
	if p.only != nil && !p.only(rank) {
		return
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		p.write(st, rank, append(st.takeHeld(rank), data[:i+1]...))
		data = data[i+1:]
	}
	if len(data) == 0 {
		return
	}
	held := append(st.held[rank], data...)
	if st.tty {
		// A terminal shows only the last state of a line redrawn with \r:
		// only that is kept, however many redraws come meanwhile.
		held = latestState(held)
	}
	early := o.GetPaused() && (st.tty || bytes.IndexByte(held, '\r') >= 0)
	if early || st.open == rank || len(held) > maxHeldBytes {
		delete(st.held, rank)
		p.write(st, rank, held)
		return
	}
	st.held[rank] = held
}

// latestState is what a terminal ends up showing of an unfinished line
// redrawn with \r: its last drawing, and the \r after it if the line ends
// with one (the next drawing starts over). A drawing shorter than the one
// before it leaves the rest of that one out, as a progress bar, which draws
// each state whole, never needs.
func latestState(line []byte) []byte {
	body, cr := line, false
	for len(body) > 0 && body[len(body)-1] == '\r' {
		body, cr = body[:len(body)-1], true
	}
	i := bytes.LastIndexByte(body, '\r')
	if i < 0 {
		return line
	}
	out := body[i:] // its \r kept: a redraw starts at the line's start
	if cr {
		out = append(out[:len(out):len(out)], '\r')
	}
	return out
}

func (st *printStream) takeHeld(rank int32) []byte {
	h := st.held[rank]
	delete(st.held, rank)
	return h
}

// write writes data of one rank, tagging the start of each line and, so a
// progress bar keeps its tag, each carriage return.
func (p *Printer) write(st *printStream, rank int32, data []byte) {
	if len(data) == 0 {
		return
	}
	if st.open >= 0 && st.open != rank {
		if st.tty && st.shown != nil {
			// Clear the unfinished line; it shows again when it goes on.
			st.buf.WriteString("\r\x1b[K")
			st.held[st.open] = latestState(st.shown)
		} else {
			st.buf.WriteByte('\n')
		}
		st.open, st.shown = -1, nil
	}
	var tag []byte
	if p.now != nil {
		tag = p.now().UTC().AppendFormat(tag, "2006-01-02T15:04:05.000Z07:00 ")
	}
	if p.tag {
		tag = append(tag, "["+strconv.Itoa(int(rank))+"] "...)
	}
	continuing := st.open == rank
	// A tag goes before each drawing of a line: its text, and each redraw
	// after a \r, never before a \r itself (a pipe would show it twice).
	pending, afterCR := !continuing, false
	if continuing {
		pending, afterCR = st.tagDue, st.tagDue
	}
	for _, b := range data {
		if pending && tag != nil && b != '\r' && (b != '\n' || !afterCR) {
			st.buf.Write(tag)
		}
		if b != '\r' {
			pending = false
		}
		st.buf.WriteByte(b)
		switch b {
		case '\n':
			pending, afterCR = true, false
		case '\r':
			pending, afterCR = true, true
		}
	}
	st.tagDue = pending && afterCR
	switch {
	case data[len(data)-1] == '\n':
		st.open, st.shown = -1, nil
	case continuing:
		if st.shown != nil && len(st.shown)+len(data) <= maxHeldBytes {
			st.shown = latestState(append(st.shown, data...))
		} else {
			st.shown = nil // too long to show again: a newline ends it instead
		}
	default:
		st.open = rank
		st.shown = nil
		if len(data) <= maxHeldBytes {
			st.shown = append([]byte(nil), data...)
		}
	}
	if st.buf.Len() >= flushBytes {
		st.flush()
	}
}

func (st *printStream) flush() {
	if st.buf.Len() > 0 && st.err == nil {
		_, st.err = st.w.Write(st.buf.Bytes())
	}
	st.buf.Reset()
}

// Flush writes what was gathered; unfinished long lines wait for their end.
func (p *Printer) Flush() {
	for _, st := range p.streams {
		st.flush()
	}
}

// Err is the first error writing stdout or stderr (a closed pipe).
func (p *Printer) Err() error {
	for _, st := range p.streams {
		if st.err != nil {
			return st.err
		}
	}
	return nil
}

// Close writes unfinished lines as they are, ends them, and flushes.
func (p *Printer) Close() {
	for _, st := range p.streams {
		for rank, h := range st.held {
			delete(st.held, rank)
			p.write(st, rank, append(h, '\n'))
		}
		if st.open >= 0 {
			st.buf.WriteByte('\n')
			st.open, st.shown = -1, nil
		}
	}
	p.Flush()
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
