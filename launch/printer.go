package launch

import (
	"bytes"
	"io"
	"strconv"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// flushBytes is how much output the printer gathers before writing.
const flushBytes = 64 << 10

// Printer writes workers' output lines, tagged with their rank, whole: each
// write holds complete lines only, so lines of different ranks never mix.
type Printer struct {
	out, err io.Writer
	tag      bool
	bufOut   bytes.Buffer
	bufErr   bytes.Buffer
	partial  map[partialKey][]byte
}

type partialKey struct {
	rank   int32
	stream musterv1.Stream
}

// NewPrinter returns a printer writing stdout lines to out and stderr lines
// to errw; tag prefixes each line with "[rank] ".
func NewPrinter(out, errw io.Writer, tag bool) *Printer {
	return &Printer{out: out, err: errw, tag: tag, partial: map[partialKey][]byte{}}
}

// Line adds one output event.
func (p *Printer) Line(o *musterv1.Output) {
	k := partialKey{o.GetRank(), o.GetStream()}
	if o.GetPartial() {
		p.partial[k] = append(p.partial[k], o.GetLine()...)
		return
	}
	line := o.GetLine()
	if prev, ok := p.partial[k]; ok {
		line = append(prev, line...)
		delete(p.partial, k)
	}
	buf := &p.bufOut
	if o.GetStream() == musterv1.Stream_STREAM_STDERR {
		buf = &p.bufErr
	}
	if p.tag {
		buf.WriteByte('[')
		buf.WriteString(strconv.Itoa(int(o.GetRank())))
		buf.WriteString("] ")
	}
	buf.Write(line)
	buf.WriteByte('\n')
	if buf.Len() >= flushBytes {
		p.Flush()
	}
}

// Flush writes what was gathered; unfinished long lines wait for their end.
func (p *Printer) Flush() {
	if p.bufOut.Len() > 0 {
		p.out.Write(p.bufOut.Bytes())
		p.bufOut.Reset()
	}
	if p.bufErr.Len() > 0 {
		p.err.Write(p.bufErr.Bytes())
		p.bufErr.Reset()
	}
}

// Close writes unfinished lines as they are, then flushes.
func (p *Printer) Close() {
	for k, line := range p.partial {
		delete(p.partial, k)
		p.Line(&musterv1.Output{Rank: k.rank, Stream: k.stream, Line: line})
	}
	p.Flush()
}
