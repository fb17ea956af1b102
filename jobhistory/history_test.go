package jobhistory

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ended is the record of job id, ended at epoch plus min minutes.
func ended(id string, min int) *musterv1.HistoryCommand {
	return &musterv1.HistoryCommand{Command: &musterv1.HistoryCommand_Finished{Finished: &musterv1.JobStatus{
		JobId: id, State: musterv1.JobState_JOB_STATE_FAILED, ExitCode: 3, Summary: "rank 1 exited with code 3",
		EndedUnixMs: epoch.Add(time.Duration(min) * time.Minute).UnixMilli()}}}
}

func expire(min int) *musterv1.HistoryCommand {
	return &musterv1.HistoryCommand{Command: &musterv1.HistoryCommand_Expire{Expire: &musterv1.HistoryExpire{
		EndedBeforeUnixMs: epoch.Add(time.Duration(min) * time.Minute).UnixMilli()}}}
}

func ids(h *History) []string {
	var out []string
	for _, j := range h.List() {
		out = append(out, j.JobId)
	}
	return out
}

// memory opens a history at epoch plus 10 minutes, in dir ("" for memory).
func open(t *testing.T, dir string, maxJobs int, log *zap.Logger) *History {
	t.Helper()
	h := Open(Config{Logger: log, Dir: dir, MaxJobs: maxJobs, MaxAge: time.Hour, Now: func() time.Time { return epoch.Add(10 * time.Minute) }})
	t.Cleanup(func() { h.Close() })
	return h
}

func TestApply(t *testing.T) {
	notEnded := ended("j-run", 1)
	notEnded.GetFinished().State = musterv1.JobState_JOB_STATE_RUNNING
	noEnd := ended("j-noend", 1)
	noEnd.GetFinished().EndedUnixMs = 0
	for _, tc := range []struct {
		name    string
		maxJobs int
		cmds    []*musterv1.HistoryCommand
		want    []string
		refused int
	}{
		{"kept oldest ended first", 10, []*musterv1.HistoryCommand{ended("j-b", 2), ended("j-a", 1), ended("j-c", 3)}, []string{"j-a", "j-b", "j-c"}, 0},
		{"the oldest go past the count", 2, []*musterv1.HistoryCommand{ended("j-a", 1), ended("j-b", 2), ended("j-c", 3)}, []string{"j-b", "j-c"}, 0},
		{"an older job past the count is not kept", 2, []*musterv1.HistoryCommand{ended("j-b", 2), ended("j-c", 3), ended("j-a", 1)}, []string{"j-b", "j-c"}, 0},
		{"expire forgets jobs ended before", 10, []*musterv1.HistoryCommand{ended("j-a", 1), ended("j-b", 2), ended("j-c", 3), expire(3)}, []string{"j-c"}, 0},
		{"a record again replaces it", 10, []*musterv1.HistoryCommand{ended("j-a", 1), ended("j-b", 2), ended("j-a", 3)}, []string{"j-b", "j-a"}, 0},
		{"a job not ended is refused", 10, []*musterv1.HistoryCommand{notEnded, noEnd, {}}, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := open(t, "", tc.maxJobs, nil)
			refused := 0
			for _, c := range tc.cmds {
				if err := h.Apply(c); err != nil {
					refused++
				}
			}
			if got := ids(h); !slices.Equal(got, tc.want) || refused != tc.refused {
				t.Fatalf("jobs %v, %d refused; want %v, %d refused", got, refused, tc.want, tc.refused)
			}
		})
	}
}

// The same commands give the same history, on disk as in memory, and a
// history opened again holds what the last one held, within its bounds.
func TestReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "made", "yet")
	h := open(t, dir, 3, nil)
	if h.Path() != filepath.Join(dir, FileName) {
		t.Fatalf("path %q", h.Path())
	}
	for i, id := range []string{"j-a", "j-b", "j-c", "j-d", "j-e"} {
		h.Propose(ended(id, i+5))
	}
	h.Apply(expire(6)) // j-a, ended at 5
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := ids(h), []string{"j-c", "j-d", "j-e"}; !slices.Equal(got, want) {
		t.Fatalf("before: %v, want %v", got, want)
	}
	h = open(t, dir, 3, nil)
	if got, want := ids(h), []string{"j-c", "j-d", "j-e"}; !slices.Equal(got, want) {
		t.Fatalf("opened again: %v, want %v", got, want)
	}
	if j := h.Get("j-d"); j.GetExitCode() != 3 || j.GetSummary() != "rank 1 exited with code 3" {
		t.Fatalf("j-d: %v", j)
	}
	h.Close()
	// An hour after j-c ended (age), one job allowed (count): the bounds apply at once.
	h = Open(Config{Dir: dir, MaxJobs: 1, MaxAge: time.Hour, Now: func() time.Time { return epoch.Add(time.Hour + 7*time.Minute + time.Second) }})
	defer h.Close()
	if got, want := ids(h), []string{"j-e"}; !slices.Equal(got, want) {
		t.Fatalf("bounds at open: %v, want %v", got, want)
	}
}

func TestUnusableFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// prepare makes the data directory's state; it returns what the
		// history then holds.
		prepare   func(t *testing.T, dir string) []string
		log       string
		movedAway bool
		inMemory  bool
	}{
		{"missing", func(t *testing.T, dir string) []string { return nil }, "job history file missing: beginning it", false, false},
		{"garbage", func(t *testing.T, dir string) []string {
			writeFile(t, filepath.Join(dir, FileName), []byte(strings.Repeat("not a bbolt file\n", 1000)))
			return nil
		}, "job history file is corrupt: moved aside, starting empty", true, false},
		{"truncated", func(t *testing.T, dir string) []string {
			h := Open(Config{Dir: dir})
			h.Apply(ended("j-a", 1))
			h.Close()
			path := filepath.Join(dir, FileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, data[:100])
			return nil
		}, "job history file is corrupt: moved aside, starting empty", true, false},
		{"cut past its pages", func(t *testing.T, dir string) []string {
			manyJobs(t, dir, 40)
			path := filepath.Join(dir, FileName)
			if err := os.Truncate(path, 20000); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "job history file is corrupt: moved aside, starting empty", true, false},
		{"cut below bbolt's least", func(t *testing.T, dir string) []string {
			manyJobs(t, dir, 40)
			if err := os.Truncate(filepath.Join(dir, FileName), 5000); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "job history file is corrupt: moved aside, starting empty", true, false},
		{"pages overwritten", func(t *testing.T, dir string) []string {
			manyJobs(t, dir, 40)
			f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, page := range []int64{2, 3, 4, 5, 6} {
				if _, err := f.WriteAt([]byte(strings.Repeat("A", 200)), page*4096+16); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		}, "job history file is corrupt: moved aside, starting empty", true, false},
		{"a bad record", func(t *testing.T, dir string) []string {
			h := Open(Config{Dir: dir})
			h.Apply(ended("j-a", 1))
			h.Apply(ended("j-b", 2))
			h.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(jobsBucket).Put([]byte("j-a"), []byte("\xff\xff")) })
			h.Close()
			return []string{"j-b"}
		}, "job history: record skipped", false, false},
		{"held by another process", func(t *testing.T, dir string) []string {
			h := Open(Config{Dir: dir})
			t.Cleanup(func() { h.Close() })
			return nil
		}, "job history kept in memory only: another process holds its file", false, true},
		{"a directory in its place", func(t *testing.T, dir string) []string {
			if err := os.MkdirAll(filepath.Join(dir, FileName), 0o700); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "job history kept in memory only: cannot open its file", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			want := tc.prepare(t, dir)
			core, logs := observer.New(zapcore.InfoLevel)
			h := open(t, dir, 10, zap.New(core))
			path := filepath.Join(dir, FileName)
			if got := ids(h); !slices.Equal(got, want) {
				t.Errorf("jobs %v, want %v", got, want)
			}
			if tc.log != "" {
				found := logs.FilterMessage(tc.log).FilterField(zap.String("file", path)).All()
				if len(found) != 1 {
					t.Errorf("no log %q naming %s; logged: %v", tc.log, path, logs.All())
				}
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if (len(aside) == 1) != tc.movedAway {
				t.Errorf("moved aside: %v", aside)
			}
			if (h.Path() == "") != tc.inMemory {
				t.Errorf("file %q, in memory only: %v", h.Path(), tc.inMemory)
			}
			// The history works either way, and a usable file keeps the record.
			h.Apply(ended("j-new", 9))
			if h.Get("j-new") == nil {
				t.Fatal("j-new not kept")
			}
			if tc.inMemory {
				return
			}
			h.Close()
			h = open(t, dir, 10, nil)
			if h.Get("j-new") == nil {
				t.Fatal("j-new not kept in the file")
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A record keeps no environment values and a short stderr tail.
func TestRecordTrimmed(t *testing.T) {
	h := open(t, "", 10, nil)
	cmd := ended("j-a", 1)
	var tail []string
	for i := range 100 {
		tail = append(tail, strings.Repeat("x", 300)+string(rune('a'+i%26)))
	}
	cmd.GetFinished().Spec = &musterv1.JobSpec{Argv: [][]byte{[]byte("python")}, Env: [][]byte{[]byte("WANDB_API_KEY=secret"), []byte("PLAIN")}}
	cmd.GetFinished().Failure = &musterv1.WorkerExited{Rank: 1, StderrTail: tail}
	orig := proto.Clone(cmd)
	h.Apply(cmd)
	j := h.Get("j-a")
	if env := j.GetSpec().GetEnv(); len(env) != 2 || string(env[0]) != "WANDB_API_KEY" || string(env[1]) != "PLAIN" {
		t.Errorf("env %q", env)
	}
	got := j.GetFailure().GetStderrTail()
	if n := totalLen(got); n > maxStderrBytes || len(got) == 0 || got[len(got)-1] != tail[len(tail)-1] {
		t.Errorf("stderr tail of %d lines, %d bytes, ends %q", len(got), n, got[len(got)-1:])
	}
	if !proto.Equal(cmd, orig) {
		t.Error("the command was changed")
	}
}

// FuzzDecodeRecord: whatever a file holds, a record decodes to an ended
// job under its own key or is refused, without a panic.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := proto.Marshal(ended("j-a", 1).GetFinished())
	f.Add([]byte("j-a"), good)
	f.Add([]byte("j-b"), good)
	f.Add([]byte("j-a"), good[:len(good)/2])
	f.Add([]byte(""), []byte{})
	f.Add([]byte("j-a"), []byte("\x0a\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		st, err := decodeRecord(key, value)
		if err != nil {
			return
		}
		if st.JobId != string(key) || checkRecord(st) != nil {
			t.Fatalf("accepted %v under %q", st, key)
		}
	})
}

// A record of the largest job a spec allows fits the record's bound, and
// says it was trimmed; a small one is kept whole.
func TestRecordWithinBudget(t *testing.T) {
	var nodes []string
	for i := range 10_000 {
		nodes = append(nodes, fmt.Sprintf("gpu-node-%05d.cluster.example", i))
	}
	big := ended("j-big", 1)
	big.GetFinished().Spec = &musterv1.JobSpec{Argv: [][]byte{[]byte(strings.Repeat("a", 1<<20))}, Hosts: nodes}
	big.GetFinished().Nodes = nodes
	for r := range 32 {
		big.GetFinished().RoundNodes = append(big.GetFinished().RoundNodes, &musterv1.JobRound{Number: int32(r), Nodes: nodes})
	}
	small := ended("j-small", 2)
	small.GetFinished().Spec = &musterv1.JobSpec{Argv: [][]byte{[]byte("python"), []byte("train.py")}, Hosts: nodes[:4]}
	small.GetFinished().Nodes = nodes[:2]
	small.GetFinished().RoundNodes = []*musterv1.JobRound{{Nodes: nodes[:2]}}
	h := open(t, t.TempDir(), 10, nil)
	h.Apply(big)
	h.Apply(small)
	if j := h.Get("j-big"); proto.Size(j) > recordBudget || !j.Trimmed || j.ExitCode != 3 || len(j.GetSpec().GetArgv()) != 1 {
		t.Errorf("the large record: %d bytes, trimmed %v", proto.Size(j), j.Trimmed)
	}
	if j := h.Get("j-small"); j.Trimmed || !proto.Equal(j, small.GetFinished()) {
		t.Errorf("the small record: %v", j)
	}
	h.Close()
	h = open(t, h.cfg.Dir, 10, nil)
	if got := ids(h); !slices.Equal(got, []string{"j-big", "j-small"}) {
		t.Errorf("read again: %v", got)
	}
}

// manyJobs writes n ended jobs to a history file in dir, with stderr tails
// that make it some pages long.
func manyJobs(t *testing.T, dir string, n int) {
	t.Helper()
	h := Open(Config{Dir: dir})
	for i := range n {
		st := ended(fmt.Sprintf("j-%03d", i), i+1)
		st.GetFinished().Summary = strings.Repeat("a long summary ", 100)
		if err := h.Apply(st); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
}
