package flightrec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseFixture(t testing.TB, name string) *Dump {
	t.Helper()
	d, err := Parse(readFixture(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

func TestParseFixtures(t *testing.T) {
	all4 := []int32{0, 1, 2, 3}
	for _, tt := range []struct {
		file    string
		version string
		entries int
		last    map[string]Entry // per group, TimeCreatedNs and Ranks left out
		groups  []string
	}{
		{"hang4_rank0.pkl", "2.10", 25, map[string]Entry{
			"0": {Seq: 21, PGID: "0", PGName: "default_pg", Op: "nccl:all_reduce", State: StateScheduled},
			"1": {Seq: 3, P2PSeq: 1, PGID: "1", PGName: "undefined", Op: "nccl:_allgather_base", State: StateCompleted},
		}, []string{"0", "1"}},
		{"hang4_rank2.pkl", "2.10", 20, map[string]Entry{
			"0": {Seq: 20, PGID: "0", PGName: "default_pg", Op: "nccl:all_reduce", State: StateCompleted},
		}, []string{"0"}},
		{"hang4_rank3.pkl", "2.10", 21, map[string]Entry{
			"0": {Seq: 21, PGID: "0", PGName: "default_pg", Op: "nccl:all_reduce", State: StateScheduled},
		}, []string{"0"}},
		{"memo_big.pkl", "2.10", 301, map[string]Entry{
			"0": {Seq: 301, PGID: "0", PGName: "default_pg", Op: "nccl:broadcast", State: StateStarted},
		}, []string{"0"}},
		{"old22.pkl", "", 3, map[string]Entry{
			"0": {Seq: 3, PGID: "0", Op: "nccl:all_reduce", State: StateScheduled},
		}, nil},
		{"tagged.pkl", "2.10", 2, map[string]Entry{
			"0": {Seq: 2, PGID: "0", PGName: "default_pg", Op: "nccl:all_reduce", State: StateScheduled},
		}, []string{"0"}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			d := parseFixture(t, tt.file)
			if d.Version != tt.version || len(d.Entries) != tt.entries {
				t.Fatalf("version %q with %d entries, want %q with %d", d.Version, len(d.Entries), tt.version, tt.entries)
			}
			last := d.Last()
			for k, e := range last {
				e.TimeCreatedNs, e.Ranks = 0, nil
				last[k] = e
			}
			if !reflect.DeepEqual(last, tt.last) {
				t.Fatalf("last:\n got %+v\nwant %+v", last, tt.last)
			}
			var groups []string
			for g := range d.Groups {
				groups = append(groups, g)
			}
			slices.Sort(groups)
			if !slices.Equal(groups, tt.groups) {
				t.Fatalf("groups %v, want %v", groups, tt.groups)
			}
		})
	}

	d := parseFixture(t, "hang4_rank0.pkl")
	if g := d.Groups["0"]; g.Desc != "default_pg" || !slices.Equal(g.Ranks, all4) {
		t.Fatalf("group 0: %+v", g)
	}
	if g := d.Groups["1"]; !slices.Equal(g.Ranks, []int32{0, 1}) {
		t.Fatalf("group 1: %+v", g)
	}
	first := d.Entries[0]
	want := Entry{Seq: 1, PGID: "0", PGName: "default_pg", Op: "nccl:all_reduce", State: StateCompleted,
		TimeCreatedNs: 1_760_000_000_000_000_000, Ranks: all4}
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("first entry %+v, want %+v", first, want)
	}
	var p2p []Entry
	for _, e := range d.Entries {
		if e.IsP2P {
			p2p = append(p2p, e)
		}
	}
	if len(p2p) != 1 || p2p[0].Op != "nccl:send 0->1" || p2p[0].P2PSeq != 1 || p2p[0].Seq != 2 {
		t.Fatalf("p2p entries %+v", p2p)
	}
	if old := parseFixture(t, "old22.pkl"); old.Entries[0].TimeCreatedNs != 1_760_000_000_000_000_000 {
		t.Fatalf("time_created_us read as %d ns", old.Entries[0].TimeCreatedNs)
	}
}

// Python's own pickle, at every protocol, reads as the C++ pickler's form.
func TestPythonProtocols(t *testing.T) {
	want := parseFixture(t, "hang4_rank0.pkl")
	for _, p := range []string{"0", "1", "2", "4", "5"} {
		t.Run("protocol "+p, func(t *testing.T) {
			if got := parseFixture(t, "py"+p+"_rank0.pkl"); !reflect.DeepEqual(got, want) {
				t.Fatalf("protocol %s differs:\n got %+v\nwant %+v", p, got, want)
			}
		})
	}
}

func TestHang4(t *testing.T) {
	lasts := map[int32]map[string]Entry{}
	for r := range int32(4) {
		d, err := ReadFile(filepath.Join("testdata", "hang4_rank"+string(rune('0'+r))+".pkl"))
		if err != nil {
			t.Fatal(err)
		}
		lasts[r] = d.Last()
	}
	want := []Straggler{{PG: "0", PGName: "default_pg", Rank: 2, LastSeq: 20, LastState: StateCompleted,
		WaitedSeq: 21, WaitedOp: "nccl:all_reduce", Waiting: []int32{0, 1, 3}}}
	if got := Stragglers(lasts); !reflect.DeepEqual(got, want) {
		t.Fatalf("stragglers\n got %+v\nwant %+v", got, want)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []byte
		want string
	}{
		{"os.system", readFixture(t, "evil_global.pkl"), "GLOBAL os.system refused"},
		{"stack global", readFixture(t, "evil_stack_global.pkl"), "STACK_GLOBAL refused"},
		{"build", []byte("\x80\x02}}b."), "BUILD refused"},
		{"reduce of a dict", []byte("\x80\x02})R."), "REDUCE refused"},
		{"newobj", []byte("\x80\x02})\x81."), "NEWOBJ refused"},
		{"inst", []byte("(ios\nsystem\n."), "INST refused"},
		{"persistent id", []byte("\x80\x02X\x01\x00\x00\x00aQ."), "BINPERSID refused"},
		{"ext", []byte("\x80\x02\x82\x01."), "EXT1 refused"},
		{"out of band buffer", []byte("\x80\x05\x97."), "NEXT_BUFFER refused"},
		{"protocol 6", []byte("\x80\x06N."), "protocol 6"},
		{"unknown opcode", []byte("\x80\x02\xff."), "opcode 0xff is not one"},
		{"quoted string", []byte("S'a'\n."), "opcode 'S' is not one"},
		{"get before put", []byte("\x80\x02h\x07."), "memo 7 was never stored"},
		{"append to a dict", []byte("\x80\x02}Na."), "APPEND to a"},
		{"setitem on a list", []byte("\x80\x02]NNs."), "SETITEM on a"},
		{"odd setitems", []byte("\x80\x02}(Nu."), "odd number"},
		{"tuple2 of one", []byte("\x80\x02N\x86."), "TUPLE2 on a stack of 1"},
		{"appends without mark", []byte("\x80\x02]e."), "no MARK"},
		{"stop on empty", []byte("\x80\x02."), "stack is empty"},
		{"not a dict", []byte("\x80\x02K\x01."), "the dump is a int"},
		{"entries not a list", []byte("\x80\x02}(X\x07\x00\x00\x00entriesK\x01u."), "entries is a int"},
		{"entry not a dict", []byte("\x80\x02]K\x01a."), "entry 0: a int"},
		{"seq not an int", []byte("\x80\x02](}(X\x11\x00\x00\x00collective_seq_idX\x01\x00\x00\x00xue."), "collective_seq_id is a str"},
		{"negative long4", []byte("\x80\x02\x8b\xff\xff\xff\xff."), "negative length"},
		{"deep marks", append([]byte("\x80\x02"), strings.Repeat("(", MaxDepth+1)...), "MARKs nest deeper"},
		{"deep lists", []byte("\x80\x02" + strings.Repeat("]", MaxDepth+1) + strings.Repeat("a", MaxDepth) + "."), "nest deeper"},
		{"deep tuples", []byte("\x80\x02N" + strings.Repeat("\x85", MaxDepth+1) + "."), "nest deeper"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	// More objects than allowed, from a small input: DUP copies the top.
	many := append([]byte("\x80\x02N"), []byte(strings.Repeat("2", MaxObjects))...)
	if _, err := Parse(append(many, '.')); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("objects: %v", err)
	}
	if _, err := Parse(make([]byte, MaxDumpSize+1)); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("size: %v", err)
	}
	// A length past the end is a truncated dump, not an allocation.
	for _, in := range []string{"\x80\x02X\xff\xff\xff\xff", "\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff",
		"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7fN.", "\x80\x02\x8b\xff\xff\xff\x7f"} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%q: %v", in, err)
		}
	}
}

// Every cut of a dump reads as truncated: PyTorch writes the file in
// place, and a reader that comes early must know to try again.
func TestParseTruncated(t *testing.T) {
	b := readFixture(t, "hang4_rank0.pkl")
	for n := range len(b) - 1 {
		if _, err := Parse(b[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d of %d: %v", n, len(b), err)
		}
	}
}

func TestIntegers(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want any
	}{
		{"K\xff", int64(255)},
		{"M\xff\xff", int64(65535)},
		{"J\xff\xff\xff\xff", int64(-1)},
		{"J\x00\x00\x00\x80", int64(-1 << 31)},
		{"\x8a\x00", int64(0)},
		{"\x8a\x01\xff", int64(-1)},
		{"\x8a\x02\x00\x80", int64(-32768)},
		{"\x8a\x05\x00\x00\x00\x00\x80", int64(-1 << 39)},
		{"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80", int64(-1 << 63)},
		{"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\x00", int64(1<<63 - 1)},
		{"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00", pyBigInt{}},
		{"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff", int64(-1 << 63)},
		{"\x8b\x02\x00\x00\x00\x01\x01", int64(257)},
		{"I42\n", int64(42)},
		{"I-7\n", int64(-7)},
		{"I01\n", true},
		{"I00\n", false},
		{"L99999999999999999999L\n", pyBigInt{}},
		{"L-5L\n", int64(-5)},
		{"F0.25\n", 0.25},
		{"G?\xd0\x00\x00\x00\x00\x00\x00", 0.25},
		{"V\\u00e9t\\U0001F600\n", "ét😀"},
		{"U\x02ab", "ab"},
		{"C\x02ab", pyBytes("ab")},
	} {
		v, err := unpickle([]byte(tt.in + "."))
		if err != nil || !reflect.DeepEqual(v, tt.want) {
			t.Errorf("%q: %#v, %v; want %#v", tt.in, v, err, tt.want)
		}
	}
}

// Memoized containers are the same object: pickle fills a list after it
// stored it, and later references see the items.
func TestMemoSharesContainers(t *testing.T) {
	v, err := unpickle([]byte("\x80\x02]q\x00(]q\x01h\x01eh\x01K\x07a0."))
	if err != nil {
		t.Fatal(err)
	}
	outer := v.(*pyList)
	inner := outer.items[0].(*pyList)
	if len(outer.items) != 2 || outer.items[1] != any(inner) || len(inner.items) != 1 {
		t.Fatalf("%#v", outer)
	}
	// A list that holds itself does not trouble the reader.
	if _, err := Parse([]byte("\x80\x02]q\x00h\x00a.")); err == nil || !strings.Contains(err.Error(), "entry 0") {
		t.Fatalf("self-holding list: %v", err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, readFixture(t, "hang4_rank1.pkl"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if f, err := os.Create(big); err != nil {
		t.Fatal(err)
	} else {
		f.Truncate(MaxDumpSize + 1)
		f.Close()
	}
	half := filepath.Join(dir, "half")
	if err := os.WriteFile(half, readFixture(t, "hang4_rank1.pkl")[:1000], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want string // "" for success
	}{
		{good, ""},
		{link, "symbolic link"},
		{fifo, "not a regular file"},
		{dir, "not a regular file"},
		{big, "over"},
		{half, "before its STOP"},
		{filepath.Join(dir, "none"), "no such file"},
	} {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			d, err := ReadFile(tt.path)
			if tt.want == "" {
				if err != nil || len(d.Entries) != 25 {
					t.Fatalf("%v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestLast(t *testing.T) {
	d := &Dump{Entries: []Entry{
		{Seq: 1, PGID: "0", State: StateCompleted},
		{Seq: 1, PGID: "1", State: StateCompleted},
		{Seq: 2, PGID: "0", State: StateStarted},
		{Seq: 2, PGID: "0", IsP2P: true, Op: "nccl:send 0->1"},
		{Seq: 4, PGName: "named", State: StateScheduled},
	}}
	want := map[string]Entry{
		"0":     {Seq: 2, PGID: "0", State: StateStarted},
		"1":     {Seq: 1, PGID: "1", State: StateCompleted},
		"named": {Seq: 4, PGName: "named", State: StateScheduled},
	}
	if got := d.Last(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := (&Dump{}).Last(); len(got) != 0 {
		t.Fatalf("empty dump: %+v", got)
	}
}

func TestRankList(t *testing.T) {
	for _, tt := range []struct {
		in   any
		want []int32
	}{
		{"[0, 1, 2]", []int32{0, 1, 2}},
		{"[3,1]", []int32{3, 1}},
		{" [ 7 ] ", []int32{7}},
		{"[]", []int32{}},
		{"0, 1", nil},
		{"[0, x]", nil},
		{"[-1]", nil},
		{&pyList{items: []any{int64(4), int64(5)}}, []int32{4, 5}},
		{&pyList{items: []any{"4"}}, nil},
		{int64(3), nil},
	} {
		if got := rankList(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v: %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestP2PByName(t *testing.T) {
	for op, want := range map[string]bool{
		"nccl:send 0->1": true, "nccl:recv 1<-0": true, "nccl:all_reduce": false,
		"nccl:coalesced": false, "send": false, "": false,
	} {
		if got := p2pByName(op); got != want {
			t.Errorf("%q: %v", op, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join("testdata", "*.pkl"))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		// The fuzzer spends its time minimizing mutants of large seeds;
		// the large fixture's opcodes are in the small ones too.
		if len(b) <= 16<<10 {
			f.Add(b)
		}
	}
	f.Add([]byte("\x80\x02]q\x00h\x00a."))
	f.Add([]byte("(dp0\nVentries\np1\n(lp2\n(dp3\nVstate\np4\nVscheduled\np5\nsas."))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		if err != nil {
			return
		}
		last := d.Last()
		Stragglers(map[int32]map[string]Entry{0: last, 1: last, 2: {}})
	})
}
