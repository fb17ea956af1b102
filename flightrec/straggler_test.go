package flightrec

import (
	"reflect"
	"testing"
)

// at is a rank's last collective in a group.
func at(pg string, seq int64, state string, ranks ...int32) Entry {
	e := Entry{Seq: seq, PGID: pg, PGName: "pg" + pg, Op: "nccl:all_reduce", State: state}
	if len(ranks) > 0 {
		e.Ranks = ranks
	}
	return e
}

func TestStragglers(t *testing.T) {
	const (
		sch  = StateScheduled
		st   = StateStarted
		done = StateCompleted
	)
	for _, tt := range []struct {
		name  string
		lasts map[int32]map[string]Entry
		want  []Straggler
	}{
		{"rank 2 of 4 stopped before the 21st all_reduce", map[int32]map[string]Entry{
			0: {"0": at("0", 21, sch)}, 1: {"0": at("0", 21, sch)},
			2: {"0": at("0", 20, done)}, 3: {"0": at("0", 21, sch)},
		}, []Straggler{{PG: "0", PGName: "pg0", Rank: 2, LastSeq: 20, LastState: done,
			WaitedSeq: 21, WaitedOp: "nccl:all_reduce", Waiting: []int32{0, 1, 3}}}},

		{"a sub-group of 2 behind while the default group is level", map[int32]map[string]Entry{
			0: {"0": at("0", 30, done), "1": at("1", 8, sch)},
			1: {"0": at("0", 30, done), "1": at("1", 7, done)},
			2: {"0": at("0", 30, done)},
			3: {"0": at("0", 30, done)},
		}, []Straggler{{PG: "1", PGName: "pg1", Rank: 1, LastSeq: 7, LastState: done,
			WaitedSeq: 8, WaitedOp: "nccl:all_reduce", Waiting: []int32{0}}}},

		{"two stragglers", map[int32]map[string]Entry{
			0: {"0": at("0", 21, st)}, 1: {"0": at("0", 19, done)},
			2: {"0": at("0", 21, sch)}, 3: {"0": at("0", 20, st)},
		}, []Straggler{
			{PG: "0", PGName: "pg0", Rank: 1, LastSeq: 19, LastState: done, WaitedSeq: 21, WaitedOp: "nccl:all_reduce", Waiting: []int32{0, 2}},
			{PG: "0", PGName: "pg0", Rank: 3, LastSeq: 20, LastState: st, WaitedSeq: 21, WaitedOp: "nccl:all_reduce", Waiting: []int32{0, 2}},
		}},

		{"all in the same collective: the hang is not a missing rank", map[int32]map[string]Entry{
			0: {"0": at("0", 21, sch)}, 1: {"0": at("0", 21, st)}, 2: {"0": at("0", 21, sch)},
		}, nil},

		{"all completed: no hang seen, whatever the skew of the dumps", map[int32]map[string]Entry{
			0: {"0": at("0", 22, done)}, 1: {"0": at("0", 21, done)}, 2: {"0": at("0", 22, done)},
		}, nil},

		{"only one rank dumped", map[int32]map[string]Entry{
			0: {"0": at("0", 21, sch)},
		}, nil},

		{"nothing dumped", nil, nil},

		{"a member without entries in the group, members known", map[int32]map[string]Entry{
			0: {"0": at("0", 21, sch, 0, 1, 2)}, 1: {"0": at("0", 21, sch, 0, 1, 2)}, 2: {},
		}, []Straggler{{PG: "0", PGName: "pg0", Rank: 2, WaitedSeq: 21, WaitedOp: "nccl:all_reduce", Waiting: []int32{0, 1}}}},

		{"a member without entries and one other dump still makes two", map[int32]map[string]Entry{
			0: {"1": at("1", 5, sch, 0, 3)}, 3: {"0": at("0", 9, done, 0, 3)},
		}, []Straggler{{PG: "1", PGName: "pg1", Rank: 3, WaitedSeq: 5, WaitedOp: "nccl:all_reduce", Waiting: []int32{0}}}},

		{"a rank without entries in the group, members unknown", map[int32]map[string]Entry{
			0: {"0": at("0", 21, sch)}, 1: {"0": at("0", 21, sch)}, 2: {},
		}, nil},

		{"a member that did not dump is not judged", map[int32]map[string]Entry{
			0: {"0": at("0", 21, sch, 0, 1, 2)}, 1: {"0": at("0", 21, sch, 0, 1, 2)},
		}, nil},

		{"split groups share a name but not their ranks", map[int32]map[string]Entry{
			0: {"2": at("2", 5, sch, 0, 1)}, 1: {"2": at("2", 5, sch, 0, 1)},
			2: {"2": at("2", 3, done, 2, 3)}, 3: {"2": at("2", 3, done, 3, 2)},
		}, nil},

		{"a straggler in one of two split groups", map[int32]map[string]Entry{
			0: {"2": at("2", 5, done, 0, 1)}, 1: {"2": at("2", 5, done, 0, 1)},
			2: {"2": at("2", 4, sch, 2, 3)}, 3: {"2": at("2", 3, done, 2, 3)},
		}, []Straggler{{PG: "2", PGName: "pg2", Rank: 3, LastSeq: 3, LastState: done,
			WaitedSeq: 4, WaitedOp: "nccl:all_reduce", Waiting: []int32{2}}}},

		{"behind in two groups, sorted by rank then group", map[int32]map[string]Entry{
			0: {"0": at("0", 9, sch), "1": at("1", 4, st)},
			1: {"0": at("0", 8, done), "1": at("1", 3, done)},
		}, []Straggler{
			{PG: "0", PGName: "pg0", Rank: 1, LastSeq: 8, LastState: done, WaitedSeq: 9, WaitedOp: "nccl:all_reduce", Waiting: []int32{0}},
			{PG: "1", PGName: "pg1", Rank: 1, LastSeq: 3, LastState: done, WaitedSeq: 4, WaitedOp: "nccl:all_reduce", Waiting: []int32{0}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Stragglers(tt.lasts); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestRankSet(t *testing.T) {
	if rankSet(nil) != "?" || rankSet([]int32{}) == "?" {
		t.Fatal("unknown and empty must differ")
	}
	if rankSet([]int32{3, 1, 2}) != rankSet([]int32{1, 2, 3}) {
		t.Fatal("order must not matter")
	}
	if rankSet([]int32{1, 2}) == rankSet([]int32{1, 3}) || rankSet([]int32{1}) == rankSet([]int32{1, 1}) {
		t.Fatal("different sets must differ")
	}
	r := []int32{3, 1}
	rankSet(r)
	if r[0] != 3 {
		t.Fatal("rankSet sorted its argument")
	}
}
