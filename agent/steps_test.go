package agent

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestRunSteps(t *testing.T) {
	bad := errors.New("bad")
	tests := []struct {
		name    string
		fail    string // the step that fails, if any
		noUndo  string // the step without an undo, if any
		noDo    string // the step without a do, if any
		end     bool   // the job ends once its steps are done
		want    string
		wantErr error
	}{
		{name: "all done", want: "before a, do a, before b, do b, before c, do c"},
		{name: "all done, then the end", end: true, want: "before a, do a, before b, do b, before c, do c, undo c, undo b, undo a"},
		{name: "first fails", fail: "a", want: "before a, do a, undo a", wantErr: bad},
		{name: "middle fails", fail: "b", want: "before a, do a, before b, do b, undo b, undo a", wantErr: bad},
		{name: "last fails", fail: "c", want: "before a, do a, before b, do b, before c, do c, undo c, undo b, undo a", wantErr: bad},
		{name: "a step without undo", fail: "c", noUndo: "b", want: "before a, do a, before b, do b, before c, do c, undo c, undo a", wantErr: bad},
		{name: "a step without do", fail: "c", noDo: "a", want: "before a, before b, do b, before c, do c, undo c, undo b, undo a", wantErr: bad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			var steps []step
			for _, name := range []string{"a", "b", "c"} {
				st := step{name: name}
				if name != tt.noDo {
					st.do = func() error {
						log = append(log, "do "+name)
						if name == tt.fail {
							return bad
						}
						return nil
					}
				}
				if name != tt.noUndo {
					st.undo = func() { log = append(log, "undo "+name) }
				}
				steps = append(steps, st)
			}
			err := runSteps(steps, stepHooks{do: func(name string) { log = append(log, "before "+name) }})
			if tt.end {
				undoSteps(steps, stepHooks{})
			}
			if got := strings.Join(log, ", "); got != tt.want || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("got %q, %v\nwant %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// A start that fails after its last step but one takes everything back,
// and taking it back again harms nothing.
func TestStartUndoneTwice(t *testing.T) {
	tmp, logs := t.TempDir(), t.TempDir()
	a := &Agent{cfg: Config{Name: "node", TempDir: tmp, Environ: []string{"PATH=/bin:/usr/bin"}}, log: zap.NewNop(),
		ports: map[string][]net.Listener{}, torchStores: map[string]*torchStore{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.ports["j-1-r0"] = []net.Listener{l}
	asg := &musterv1.Assignment{
		JobId: "j-1", RoundId: "j-1-r0", NodeRank: 0, Nnodes: 1, Nproc: 2, WorldSize: 2,
		Spec:       &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 1, Nproc: 2, LogDir: []byte(logs)},
		MasterAddr: "127.0.0.1", MasterPort: 29500, NcclUniqueId: make([]byte, 128),
		NodeAddrs: []string{"127.0.0.1"}, NodeNames: []string{"node"}, NodeSlots: []int32{2},
	}
	js := &jobStart{a: a, asg: asg, sup: newSupervisor(a.log, asg.GetJobId(), "node", 0, nil)}
	// The health check reports to a store, which this agent has none of.
	steps := slices.DeleteFunc(js.steps(), func(st step) bool { return st.name == "health" })
	if last := steps[len(steps)-1].name; last != "workers" {
		t.Fatalf("the last step is %q", last)
	}
	bad := errors.New("bad")
	steps[len(steps)-1] = step{name: "fails", do: func() error { return bad }}
	if err := runSteps(steps, stepHooks{}); err != bad {
		t.Fatalf("runSteps: %v", err)
	}
	undoSteps(steps, stepHooks{})
	if len(js.workers) != 2 || js.workers[0].readers[0] == nil {
		t.Fatalf("the steps made no pipes: %+v", js.workers)
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "*muster-*")); len(dirs) > 0 {
		t.Errorf("job directories left: %v", dirs)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the round's port is still held: %v", err)
	}
	for _, w := range js.workers {
		if w.logs != [2]*logFile{} || w.kept != nil {
			t.Errorf("rank %d's log file is open", w.plan.rank)
		}
		if _, err := js.spec.Workers[w.plan.localRank].Stdout.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
			t.Errorf("rank %d's stdout is open: %v", w.plan.rank, err)
		}
	}
}
