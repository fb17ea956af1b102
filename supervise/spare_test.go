package supervise

import (
	"bufio"
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSpare runs a job on a shim started ahead: one that waits, one that
// died before its job came (Start then starts a new one), and one closed
// unused, which must end.
func TestSpare(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill bool // the spare dies before Start
	}{
		{"waiting", false},
		{"died first", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spare, err := StartSpare()
			if err != nil {
				t.Fatal(err)
			}
			if tc.kill {
				spare.cmd.Process.Kill()
				spare.cmd.Process.Wait()
			}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			g, err := Start(Spec{Spare: spare, Workers: []Worker{{Path: "/bin/sh",
				Argv: []string{"sh", "-c", "echo out; exit 3"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: w}}})
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(r)
			if !sc.Scan() || sc.Text() != "out" {
				t.Fatalf("worker's output: %q, %v", sc.Text(), sc.Err())
			}
			var exited []Event
			for ev := range g.Events() {
				if ev.Kind == Exited {
					exited = append(exited, ev)
				}
			}
			if len(exited) != 1 || exited[0].Code != 3 {
				t.Fatalf("exits: %+v, want one with code 3", exited)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("unused", func(t *testing.T) {
		spare, err := StartSpare()
		if err != nil {
			t.Fatal(err)
		}
		pid := spare.cmd.Process.Pid
		spare.Close()
		spare.Close() // again: nothing
		if err := syscall.Kill(pid, 0); err == nil {
			t.Fatalf("the unused shim %d still runs", pid)
		}
		if code := spare.cmd.ProcessState.ExitCode(); code != 71 {
			t.Fatalf("the unused shim exited %d, want 71", code)
		}
	})
}
