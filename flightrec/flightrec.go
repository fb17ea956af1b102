// Package flightrec reads PyTorch's NCCL flight recorder dumps and tells,
// across the ranks of a job, which rank is behind in a process group: the
// one that never entered the collective the others wait in.
//
// With TORCH_NCCL_TRACE_BUFFER_SIZE (TORCH_FR_BUFFER_SIZE) above 0 every
// rank keeps its last collectives in a ring buffer. Writing to the pipe
// <TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe asks the rank to dump it to
// <TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>. The
// dump is a pickle (protocol 2) written by PyTorch's C++ pickler: a dict
// with "version", "pg_config", "pg_status", "entries" (oldest first) and
// more. Older PyTorch (2.2) wrote the entries list alone.
//
// Parse runs its own small pickle interpreter that builds data only and
// refuses every opcode that imports or calls Python code.
//
// Stragglers compares the ranks' last collective per process group: when
// some ranks are in a collective that has not completed, the ranks whose
// last collective in that group is older never entered it.
package flightrec

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// States of an entry, as PyTorch writes them.
const (
	StateScheduled = "scheduled"
	StateStarted   = "started"
	StateCompleted = "completed"
)

// Entry is one collective a rank recorded.
type Entry struct {
	Seq    int64 // collective_seq_id (seq_id in older dumps)
	P2PSeq int64 // p2p_seq_id
	IsP2P  bool  // is_p2p, or a send or recv by its name in dumps without it
	// PGID and PGName are process_group's (group name, description), e.g.
	// ("0", "default_pg"); dumps without process_group give pg_id as PGID.
	PGID, PGName  string
	Op            string // profiling_name, e.g. "nccl:all_reduce"
	State         string // scheduled, started or completed
	TimeCreatedNs int64  // time_created_ns (time_created_us in 2.2)
	// Ranks are the group's global ranks as the dump's pg_config lists
	// them, nil when it does not. Groups made by one split_group call
	// share a name across disjoint sets of ranks; Ranks tells them apart.
	// Shared between the entries of a group: do not modify.
	Ranks []int32
}

// Group is a process group as the dump's pg_config describes it.
type Group struct {
	Name, Desc string
	Ranks      []int32 // nil when the dump does not list them
}

// Dump is one rank's flight recorder.
type Dump struct {
	Version string           // the dump's format version, e.g. "2.10"; "" before it had one
	Entries []Entry          // in the dump's order, oldest first
	Groups  map[string]Group // pg_config, by group name (Entry.PGID)
}

// maxRanks bounds a group's rank list read from pg_config.
const maxRanks = 1 << 20

// ReadFile reads and parses a dump. It does not follow a symlink, refuses
// anything but a regular file and reads at most MaxDumpSize bytes. A dump
// that PyTorch is still writing gives ErrTruncated.
func ReadFile(path string) (*Dump, error) {
	// O_NONBLOCK keeps a FIFO put in the dump's place from blocking the open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("flightrec: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("flightrec: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("flightrec: %s is not a regular file", path)
	}
	if st.Size() > MaxDumpSize {
		return nil, fmt.Errorf("flightrec: %s has %d bytes, over %d", path, st.Size(), MaxDumpSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxDumpSize+1))
	if err != nil {
		return nil, fmt.Errorf("flightrec: %s: %w", path, err)
	}
	d, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return d, nil
}

// Parse reads a dump from its bytes.
func Parse(b []byte) (*Dump, error) {
	v, err := unpickle(b)
	if err != nil {
		return nil, err
	}
	d := &Dump{Groups: map[string]Group{}}
	var entries any
	switch top := v.(type) {
	case *pyDict:
		if s, ok := top.get("version"); ok {
			d.Version, _ = s.(string)
		}
		if pc, ok := top.get("pg_config"); ok {
			d.Groups = groups(pc)
		}
		entries, _ = top.get("entries")
	case *pyList:
		// PyTorch 2.2 dumped the entries alone.
		entries = top
	default:
		return nil, fmt.Errorf("flightrec: the dump is a %s, not a dict", typeName(v))
	}
	if entries == nil {
		// A dump asked for without collectives, or a rank that recorded
		// none yet (the JSON form leaves the key out then).
		return d, nil
	}
	list, ok := entries.(*pyList)
	if !ok {
		return nil, fmt.Errorf("flightrec: entries is a %s, not a list", typeName(entries))
	}
	d.Entries = make([]Entry, 0, len(list.items))
	for i, it := range list.items {
		e, err := entry(it)
		if err != nil {
			return nil, fmt.Errorf("flightrec: entry %d: %w", i, err)
		}
		if g, ok := d.Groups[e.PGID]; ok {
			e.Ranks = g.Ranks
		}
		d.Entries = append(d.Entries, e)
	}
	return d, nil
}

func entry(v any) (Entry, error) {
	m, ok := v.(*pyDict)
	if !ok {
		return Entry{}, fmt.Errorf("a %s, not a dict", typeName(v))
	}
	var e Entry
	var err error
	e.Op, _ = str(m, "profiling_name")
	e.State, _ = str(m, "state")
	if e.Seq, ok, err = integer(m, "collective_seq_id"); err == nil && !ok {
		e.Seq, _, err = integer(m, "seq_id")
	}
	if err != nil {
		return e, err
	}
	if e.P2PSeq, _, err = integer(m, "p2p_seq_id"); err != nil {
		return e, err
	}
	if e.TimeCreatedNs, ok, err = integer(m, "time_created_ns"); err == nil && !ok {
		var us int64
		us, _, err = integer(m, "time_created_us")
		e.TimeCreatedNs = us * 1000
	}
	if err != nil {
		return e, err
	}
	if p, ok := m.get("is_p2p"); ok {
		e.IsP2P, _ = p.(bool)
	} else {
		e.IsP2P = p2pByName(e.Op)
	}
	if pg, ok := m.get("process_group"); ok {
		var items []any
		switch t := pg.(type) {
		case pyTuple:
			items = t.items
		case *pyList:
			items = t.items
		}
		if len(items) > 0 {
			e.PGID, _ = items[0].(string)
		}
		if len(items) > 1 {
			e.PGName, _ = items[1].(string)
		}
	}
	if e.PGID == "" && e.PGName == "" {
		if id, ok, _ := integer(m, "pg_id"); ok {
			e.PGID = strconv.FormatInt(id, 10)
		}
	}
	return e, nil
}

// p2pByName tells a send or recv by its profiling name ("nccl:send 0->1")
// for dumps that predate is_p2p.
func p2pByName(op string) bool {
	_, name, _ := strings.Cut(op, ":")
	name, _, _ = strings.Cut(name, " ")
	return name == "send" || name == "recv"
}

func str(m *pyDict, k string) (string, bool) {
	v, ok := m.get(k)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

// integer returns an int field; a missing or None field is not an error.
func integer(m *pyDict, k string) (int64, bool, error) {
	v, ok := m.get(k)
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case int64:
		return x, true, nil
	case bool:
		if x {
			return 1, true, nil
		}
		return 0, true, nil
	case pyNone:
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("%s is a %s, not an int", k, typeName(v))
}

// groups reads pg_config: group name -> {name, desc, ranks: "[0, 1]"}. The
// earliest form mapped a group to its list of ranks.
func groups(v any) map[string]Group {
	out := map[string]Group{}
	d, ok := v.(*pyDict)
	if !ok {
		return out
	}
	for i, k := range d.keys {
		var g Group
		switch x := k.(type) {
		case string:
			g.Name = x
		case int64:
			g.Name = strconv.FormatInt(x, 10)
		default:
			continue
		}
		switch x := d.vals[i].(type) {
		case *pyDict:
			if s, ok := str(x, "name"); ok && s != "" {
				g.Name = s
			}
			g.Desc, _ = str(x, "desc")
			if r, ok := x.get("ranks"); ok {
				g.Ranks = rankList(r)
			}
		default:
			g.Ranks = rankList(x)
		}
		out[g.Name] = g
	}
	return out
}

// rankList reads "[0, 1, 2]" or a list of ints; nil if it is neither.
func rankList(v any) []int32 {
	var out []int32
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
			return nil
		}
		s = strings.TrimSpace(s[1 : len(s)-1])
		if s == "" {
			return []int32{}
		}
		for f := range strings.SplitSeq(s, ",") {
			r, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil || r < 0 || len(out) >= maxRanks {
				return nil
			}
			out = append(out, int32(r))
		}
	case *pyList:
		out = make([]int32, 0, len(x.items))
		for _, it := range x.items {
			r, ok := it.(int64)
			if !ok || r < 0 || r > 1<<31-1 {
				return nil
			}
			out = append(out, int32(r))
		}
	default:
		return nil
	}
	return out
}

func typeName(v any) string {
	switch v.(type) {
	case *pyDict:
		return "dict"
	case *pyList:
		return "list"
	case pyTuple:
		return "tuple"
	case string:
		return "str"
	case pyBytes:
		return "bytes"
	case int64, pyBigInt:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	case pyNone:
		return "None"
	}
	return fmt.Sprintf("%T", v)
}

// Last is, per process group, the rank's last recorded collective (not
// p2p), keyed by the group's id (its name if the id is empty).
func (d *Dump) Last() map[string]Entry {
	out := map[string]Entry{}
	for _, e := range d.Entries {
		if e.IsP2P {
			continue
		}
		out[groupKey(e)] = e
	}
	return out
}

func groupKey(e Entry) string {
	if e.PGID != "" {
		return e.PGID
	}
	return e.PGName
}
