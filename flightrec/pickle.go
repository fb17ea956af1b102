package flightrec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on a dump. 2,000 entries (PyTorch's default buffer) with Python
// stack traces make well under a MiB and under 200,000 objects; the bounds
// allow ten times that while keeping a hostile file from taking the
// agent's memory.
const (
	// MaxDumpSize is the largest dump read, in bytes.
	MaxDumpSize = 64 << 20
	// MaxObjects bounds the values the reader makes: every value pushed
	// on its stack and every memo store counts once.
	MaxObjects = 2_000_000
	// MaxDepth bounds the open MARKs and the nesting of containers.
	MaxDepth = 100
)

// ErrTruncated says the dump ends before its STOP: PyTorch writes the file
// in place, so a reader that comes early sees part of it. Try again later.
var ErrTruncated = errors.New("flightrec: the dump ends before its STOP (still being written?)")

// The values the reader makes. Strings are Go strings, integers int64,
// floats float64, booleans bool, None is pyNone{}. Lists and dicts are
// pointers because pickle fills them after they are memoized.
type (
	pyNone   struct{}
	pyBytes  []byte
	pyBigInt struct{} // an integer beyond int64; its value is not kept
	pyTuple  struct {
		items []any
		depth int
	}
	pyList struct {
		items []any
		depth int
	}
	pyDict struct {
		keys, vals []any
		byStr      map[string]int // index of each string key, past smallDict keys
		depth      int
	}
	// pyGlobal is one of the few torch.jit._pickle helpers the reader
	// knows to be plain data transforms; any other global is refused.
	pyGlobal struct{ name string }
)

// smallDict is the most keys a dict looks up by scanning: the dump's
// dicts are small and many, and a map each would cost more than it saves.
const smallDict = 32

// get returns the value of a string key.
func (d *pyDict) get(k string) (any, bool) {
	i := d.find(k)
	if i < 0 {
		return nil, false
	}
	return d.vals[i], true
}

// find returns the index of a string key, -1 if it is not there.
func (d *pyDict) find(k string) int {
	if d.byStr != nil {
		if i, ok := d.byStr[k]; ok {
			return i
		}
		return -1
	}
	for i, key := range d.keys {
		if s, ok := key.(string); ok && s == k {
			return i
		}
	}
	return -1
}

// add stores a key's value; a string key already there gets the new value.
func (d *pyDict) add(k, v any) {
	s, isStr := k.(string)
	if isStr {
		if i := d.find(s); i >= 0 {
			d.vals[i] = v
			return
		}
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	switch {
	case d.byStr != nil:
		if isStr {
			d.byStr[s] = len(d.keys) - 1
		}
	case len(d.keys) > smallDict:
		d.byStr = make(map[string]int, len(d.keys))
		for i, key := range d.keys {
			if s, ok := key.(string); ok {
				d.byStr[s] = i
			}
		}
	}
}

// depthOf is 1 for a container with no containers in it.
func depthOf(v any) int {
	switch x := v.(type) {
	case *pyList:
		return x.depth
	case *pyDict:
		return x.depth
	case pyTuple:
		return x.depth
	}
	return 0
}

// Opcodes, as pickletools names them.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'
	opProto          = 0x80
	opNewObj         = 0x81
	opExt1           = 0x82
	opExt2           = 0x83
	opExt4           = 0x84
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opLong4          = 0x8b
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opShortBinUni    = 0x8c
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opEmptySet       = 0x8f
	opAddItems       = 0x90
	opFrozenSet      = 0x91
	opNewObjEx       = 0x92
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
	opByteArray8     = 0x96
	opNextBuffer     = 0x97
	opReadOnlyBuffer = 0x98
)

// refused names the opcodes that import, call or build Python objects.
var refused = map[byte]string{
	opPersID: "PERSID", opBinPersID: "BINPERSID", opReduce: "REDUCE", opBuild: "BUILD",
	opGlobal: "GLOBAL", opInst: "INST", opObj: "OBJ", opNewObj: "NEWOBJ", opNewObjEx: "NEWOBJ_EX",
	opStackGlobal: "STACK_GLOBAL", opExt1: "EXT1", opExt2: "EXT2", opExt4: "EXT4",
	opNextBuffer: "NEXT_BUFFER", opReadOnlyBuffer: "READONLY_BUFFER",
}

// dataGlobals are the torch.jit._pickle functions PyTorch's C++ pickler
// wraps plain lists and dicts in (type tags, specialized lists): calling
// them only returns their argument, so the reader applies them itself.
var dataGlobals = map[string]bool{
	"torch.jit._pickle\nrestore_type_tag": true,
	"torch.jit._pickle\nbuild_intlist":    true,
	"torch.jit._pickle\nbuild_doublelist": true,
	"torch.jit._pickle\nbuild_boollist":   true,
}

// unpickler is a bounded pickle interpreter for data: it makes strings,
// numbers, lists, tuples and dicts, and refuses anything that would run
// code. It never recurses into the values it makes, so neither cycles
// nor aliasing can exhaust the Go stack.
type unpickler struct {
	b     []byte
	pos   int
	stack []any
	marks []int // stack lengths at each open MARK
	// memo holds the stored values by index. Picklers number them 0, 1,
	// 2...; an index far past the others goes to sparse instead, so that
	// a few large indices cannot make a large slice.
	memo    []any
	sparse  map[uint32]any
	stored  int // distinct indices stored: Python's len(memo)
	objects int
}

func unpickle(b []byte) (any, error) {
	if len(b) > MaxDumpSize {
		return nil, fmt.Errorf("flightrec: dump of %d bytes is over %d", len(b), MaxDumpSize)
	}
	u := &unpickler{b: b, sparse: map[uint32]any{}}
	return u.run()
}

func (u *unpickler) errorf(at int, format string, args ...any) error {
	return fmt.Errorf("flightrec: pickle byte %d: %s", at, fmt.Sprintf(format, args...))
}

// take returns the next n bytes.
func (u *unpickler) take(n uint64) ([]byte, error) {
	if n > uint64(len(u.b)-u.pos) {
		return nil, ErrTruncated
	}
	s := u.b[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return s, nil
}

func (u *unpickler) uint(n int) (uint64, error) {
	s, err := u.take(uint64(n))
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v, nil
}

// line returns the text up to the next newline, without it.
func (u *unpickler) line() (string, error) {
	i := bytes.IndexByte(u.b[u.pos:], '\n')
	if i < 0 {
		return "", ErrTruncated
	}
	s := string(u.b[u.pos : u.pos+i])
	u.pos += i + 1
	return s, nil
}

func (u *unpickler) count() error {
	u.objects++
	if u.objects > MaxObjects {
		return fmt.Errorf("flightrec: dump has more than %d objects", MaxObjects)
	}
	return nil
}

func (u *unpickler) push(v any) error {
	if err := u.count(); err != nil {
		return err
	}
	u.stack = append(u.stack, v)
	return nil
}

// base is where the values above the innermost MARK start.
func (u *unpickler) base() int {
	if len(u.marks) == 0 {
		return 0
	}
	return u.marks[len(u.marks)-1]
}

func (u *unpickler) pop(at int) (any, error) {
	if len(u.stack) <= u.base() {
		return nil, u.errorf(at, "stack is empty")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top(at int) (any, error) {
	if len(u.stack) <= u.base() {
		return nil, u.errorf(at, "stack is empty")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the values above the innermost MARK and drops it.
func (u *unpickler) popMark(at int) ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errorf(at, "no MARK")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) memoize(at int, idx uint32) error {
	v, err := u.top(at)
	if err != nil {
		return err
	}
	if err := u.count(); err != nil {
		return err
	}
	// The slice grows only near the indices stored so far: its length stays
	// within twice their number.
	if int64(idx) >= int64(len(u.memo)) && int64(idx) <= 2*int64(u.stored)+1024 {
		u.memo = append(u.memo, make([]any, int(idx)-len(u.memo)+1)...)
	}
	if int64(idx) < int64(len(u.memo)) {
		if u.memo[idx] == nil {
			u.stored++
		}
		u.memo[idx] = v
		return nil
	}
	if _, ok := u.sparse[idx]; !ok {
		u.stored++
	}
	u.sparse[idx] = v
	return nil
}

func (u *unpickler) recall(at int, idx uint32) error {
	var v any
	if int64(idx) < int64(len(u.memo)) {
		v = u.memo[idx]
	} else {
		v = u.sparse[idx]
	}
	if v == nil {
		return u.errorf(at, "memo %d was never stored", idx)
	}
	return u.push(v)
}

// nest records that child went into a container of depth *d.
func (u *unpickler) nest(at int, d *int, child any) error {
	if c := depthOf(child) + 1; c > *d {
		*d = c
	}
	if *d > MaxDepth {
		return u.errorf(at, "values nest deeper than %d", MaxDepth)
	}
	return nil
}

func (u *unpickler) tuple(at int, items []any) (pyTuple, error) {
	t := pyTuple{items: items, depth: 1}
	for _, it := range items {
		if err := u.nest(at, &t.depth, it); err != nil {
			return t, err
		}
	}
	return t, nil
}

func (u *unpickler) appendTo(at int, target any, items []any) error {
	l, ok := target.(*pyList)
	if !ok {
		return u.errorf(at, "APPEND to a %T", target)
	}
	for _, it := range items {
		if err := u.nest(at, &l.depth, it); err != nil {
			return err
		}
	}
	l.items = append(l.items, items...)
	return nil
}

func (u *unpickler) setItems(at int, target any, kv []any) error {
	d, ok := target.(*pyDict)
	if !ok {
		return u.errorf(at, "SETITEM on a %T", target)
	}
	if len(kv)%2 != 0 {
		return u.errorf(at, "odd number of items for a dict")
	}
	for i := 0; i < len(kv); i += 2 {
		k, v := kv[i], kv[i+1]
		if err := u.nest(at, &d.depth, k); err != nil {
			return err
		}
		if err := u.nest(at, &d.depth, v); err != nil {
			return err
		}
		d.add(k, v)
	}
	return nil
}

func newDict() *pyDict { return &pyDict{depth: 1} }

// intFromLE reads a little-endian two's complement integer of any length.
func intFromLE(s []byte) any {
	if len(s) == 0 {
		return int64(0)
	}
	neg := s[len(s)-1]&0x80 != 0
	if len(s) > 8 {
		// Longer forms still fit when the extra bytes only extend the sign.
		ext := byte(0)
		if neg {
			ext = 0xff
		}
		for _, c := range s[8:] {
			if c != ext {
				return pyBigInt{}
			}
		}
		if (s[7]&0x80 != 0) != neg {
			return pyBigInt{}
		}
		s = s[:8]
	}
	var v uint64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	if neg && len(s) < 8 {
		v |= ^uint64(0) << (8 * len(s))
	}
	return int64(v)
}

// textInt reads protocol 0's decimal integers.
func textInt(s string) any {
	v, err := strconv.ParseInt(strings.TrimSuffix(s, "L"), 0, 64)
	if errors.Is(err, strconv.ErrRange) {
		return pyBigInt{}
	}
	if err != nil {
		return nil
	}
	return v
}

// rawUnicodeEscape decodes protocol 0's UNICODE argument: latin-1 with
// \uXXXX and \UXXXXXXXX escapes.
func rawUnicodeEscape(s string) (string, bool) {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') {
			n := 4
			if s[i+1] == 'U' {
				n = 8
			}
			if i+2+n > len(s) {
				return "", false
			}
			r, err := strconv.ParseUint(s[i+2:i+2+n], 16, 32)
			if err != nil || r > utf8.MaxRune {
				return "", false
			}
			sb.WriteRune(rune(r))
			i += 1 + n
			continue
		}
		sb.WriteRune(rune(c))
	}
	return sb.String(), true
}

// opName names an opcode for errors.
func opName(op byte) string {
	if n, ok := refused[op]; ok {
		return n
	}
	if op >= 0x20 && op < 0x7f {
		return strconv.QuoteRune(rune(op))
	}
	return fmt.Sprintf("0x%02x", op)
}

func (u *unpickler) run() (any, error) {
	for {
		at := u.pos
		if u.pos >= len(u.b) {
			return nil, ErrTruncated
		}
		op := u.b[u.pos]
		u.pos++
		var err error
		switch op {
		case opProto:
			var v uint64
			if v, err = u.uint(1); err == nil && v > 5 {
				err = u.errorf(at, "pickle protocol %d is not known", v)
			}
		case opFrame:
			// A frame only groups opcodes for buffering; the reader has the
			// whole dump already.
			var n uint64
			if n, err = u.uint(8); err == nil && n > uint64(len(u.b)-u.pos) {
				err = ErrTruncated
			}
		case opStop:
			return u.pop(at)
		case opMark:
			if len(u.marks) >= MaxDepth {
				return nil, u.errorf(at, "MARKs nest deeper than %d", MaxDepth)
			}
			u.marks = append(u.marks, len(u.stack))
		case opPop:
			if len(u.stack) > u.base() {
				u.stack = u.stack[:len(u.stack)-1]
			} else {
				_, err = u.popMark(at)
			}
		case opPopMark:
			_, err = u.popMark(at)
		case opDup:
			var v any
			if v, err = u.top(at); err == nil {
				err = u.push(v)
			}
		case opNone:
			err = u.push(pyNone{})
		case opNewTrue:
			err = u.push(true)
		case opNewFalse:
			err = u.push(false)
		case opBinInt:
			var v uint64
			if v, err = u.uint(4); err == nil {
				err = u.push(int64(int32(uint32(v))))
			}
		case opBinInt1:
			var v uint64
			if v, err = u.uint(1); err == nil {
				err = u.push(int64(v))
			}
		case opBinInt2:
			var v uint64
			if v, err = u.uint(2); err == nil {
				err = u.push(int64(v))
			}
		case opLong1, opLong4:
			var n uint64
			if op == opLong1 {
				n, err = u.uint(1)
			} else if n, err = u.uint(4); err == nil && int32(uint32(n)) < 0 {
				err = u.errorf(at, "LONG4 of negative length")
			}
			var s []byte
			if err == nil {
				if s, err = u.take(n); err == nil {
					err = u.push(intFromLE(s))
				}
			}
		case opInt, opLong:
			var s string
			if s, err = u.line(); err == nil {
				var v any
				switch {
				case op == opInt && s == "00":
					v = false
				case op == opInt && s == "01":
					v = true
				default:
					v = textInt(s)
				}
				if v == nil {
					err = u.errorf(at, "bad integer %q", s)
				} else {
					err = u.push(v)
				}
			}
		case opFloat:
			var s string
			if s, err = u.line(); err == nil {
				var f float64
				if f, err = strconv.ParseFloat(s, 64); err != nil {
					err = u.errorf(at, "bad float %q", s)
				} else {
					err = u.push(f)
				}
			}
		case opBinFloat:
			var s []byte
			if s, err = u.take(8); err == nil {
				err = u.push(math.Float64frombits(binary.BigEndian.Uint64(s)))
			}
		case opShortBinUni, opBinUnicode, opBinUnicode8, opShortBinString, opBinString,
			opShortBinBytes, opBinBytes, opBinBytes8, opByteArray8:
			err = u.sized(at, op)
		case opUnicode:
			var s string
			if s, err = u.line(); err == nil {
				if v, ok := rawUnicodeEscape(s); ok {
					err = u.push(v)
				} else {
					err = u.errorf(at, "bad UNICODE escape")
				}
			}
		case opEmptyTuple:
			err = u.push(pyTuple{depth: 1})
		case opTuple:
			var items []any
			if items, err = u.popMark(at); err == nil {
				var t pyTuple
				if t, err = u.tuple(at, items); err == nil {
					err = u.push(t)
				}
			}
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			if len(u.stack)-u.base() < n {
				return nil, u.errorf(at, "TUPLE%d on a stack of %d", n, len(u.stack)-u.base())
			}
			items := append([]any(nil), u.stack[len(u.stack)-n:]...)
			u.stack = u.stack[:len(u.stack)-n]
			var t pyTuple
			if t, err = u.tuple(at, items); err == nil {
				err = u.push(t)
			}
		case opEmptyList, opEmptySet:
			err = u.push(&pyList{depth: 1})
		case opList, opFrozenSet:
			var items []any
			if items, err = u.popMark(at); err == nil {
				l := &pyList{depth: 1}
				if err = u.appendTo(at, l, items); err == nil {
					err = u.push(l)
				}
			}
		case opAppend:
			var v, l any
			if v, err = u.pop(at); err == nil {
				if l, err = u.top(at); err == nil {
					err = u.appendTo(at, l, []any{v})
				}
			}
		case opAppends, opAddItems:
			var items []any
			var l any
			if items, err = u.popMark(at); err == nil {
				if l, err = u.top(at); err == nil {
					err = u.appendTo(at, l, items)
				}
			}
		case opEmptyDict:
			err = u.push(newDict())
		case opDict:
			var kv []any
			if kv, err = u.popMark(at); err == nil {
				d := newDict()
				if err = u.setItems(at, d, kv); err == nil {
					err = u.push(d)
				}
			}
		case opSetItem:
			var k, v, d any
			if v, err = u.pop(at); err == nil {
				if k, err = u.pop(at); err == nil {
					if d, err = u.top(at); err == nil {
						err = u.setItems(at, d, []any{k, v})
					}
				}
			}
		case opSetItems:
			var kv []any
			var d any
			if kv, err = u.popMark(at); err == nil {
				if d, err = u.top(at); err == nil {
					err = u.setItems(at, d, kv)
				}
			}
		case opPut, opGet:
			var s string
			if s, err = u.line(); err == nil {
				var idx uint64
				if idx, err = strconv.ParseUint(s, 10, 32); err != nil {
					err = u.errorf(at, "bad memo index %q", s)
				} else if op == opPut {
					err = u.memoize(at, uint32(idx))
				} else {
					err = u.recall(at, uint32(idx))
				}
			}
		case opBinPut, opLongBinPut, opBinGet, opLongBinGet:
			n := 1
			if op == opLongBinPut || op == opLongBinGet {
				n = 4
			}
			var idx uint64
			if idx, err = u.uint(n); err == nil {
				if op == opBinPut || op == opLongBinPut {
					err = u.memoize(at, uint32(idx))
				} else {
					err = u.recall(at, uint32(idx))
				}
			}
		case opMemoize:
			err = u.memoize(at, uint32(u.stored))
		case opGlobal:
			err = u.global(at)
		case opReduce:
			err = u.reduce(at)
		default:
			if n, ok := refused[op]; ok {
				return nil, u.errorf(at, "opcode %s refused: a flight recorder dump holds only data, and this would import, call or build Python objects", n)
			}
			return nil, u.errorf(at, "opcode %s is not one a flight recorder dump uses", opName(op))
		}
		if err != nil {
			return nil, err
		}
	}
}

// sized reads the opcodes whose argument is a length and that many bytes.
func (u *unpickler) sized(at int, op byte) error {
	var n uint64
	var err error
	switch op {
	case opShortBinUni, opShortBinString, opShortBinBytes:
		n, err = u.uint(1)
	case opBinUnicode, opBinBytes:
		n, err = u.uint(4)
	case opBinString:
		if n, err = u.uint(4); err == nil && int32(uint32(n)) < 0 {
			return u.errorf(at, "BINSTRING of negative length")
		}
	default:
		n, err = u.uint(8)
	}
	if err != nil {
		return err
	}
	s, err := u.take(n)
	if err != nil {
		return err
	}
	switch op {
	case opShortBinBytes, opBinBytes, opBinBytes8, opByteArray8:
		return u.push(pyBytes(append([]byte(nil), s...)))
	}
	// Strings are kept as written: PyTorch's C++ side writes its bytes
	// without checking they are UTF-8, and a path or a name in a stack
	// frame must not cost the whole dump.
	return u.push(string(s))
}

// global accepts only the torch.jit._pickle helpers in dataGlobals.
func (u *unpickler) global(at int) error {
	mod, err := u.line()
	if err != nil {
		return err
	}
	name, err := u.line()
	if err != nil {
		return err
	}
	key := mod + "\n" + name
	if !dataGlobals[key] {
		return u.errorf(at, "opcode GLOBAL %s.%s refused: a flight recorder dump holds only data, and this would import Python code", mod, name)
	}
	return u.push(pyGlobal{name: key})
}

// reduce applies one of the data helpers to its arguments.
func (u *unpickler) reduce(at int) error {
	args, err := u.pop(at)
	if err != nil {
		return err
	}
	fn, err := u.pop(at)
	if err != nil {
		return err
	}
	g, ok := fn.(pyGlobal)
	if !ok {
		return u.errorf(at, "opcode REDUCE refused: it would call a %T", fn)
	}
	t, ok := args.(pyTuple)
	if !ok || len(t.items) == 0 {
		return u.errorf(at, "REDUCE of %s without arguments", g.name)
	}
	// restore_type_tag(value, type) and build_*list(list) all return their
	// first argument.
	return u.push(t.items[0])
}
