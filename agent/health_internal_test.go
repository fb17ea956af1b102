package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

func TestRunHealthCommand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		cmd     string
		timeout time.Duration
		wantErr string // "" for success; else every part, separated by "|"
	}{
		{"passes", "exit 0", time.Minute, ""},
		{"fails with its output's tail", "for i in 1 2 3 4 5 6 7; do echo line $i; done; echo; echo disk full >&2; exit 3",
			time.Minute, `"for i in 1 2 3 4 5 6 7; do echo line $i; done; echo; echo disk full >&2; exit 3" exited with code 3 after |: line 4 | line 5 | line 6 | line 7 | disk full`},
		{"sees its environment", `[ "$MUSTER_JOB_ID" = j-1 ] && [ "$CUDA_VISIBLE_DEVICES" = 0,1 ]`, time.Minute, ""},
		{"runs past its timeout", "echo started; sleep 60", 200 * time.Millisecond, `"echo started; sleep 60" did not exit within 200ms: started`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := []string{"PATH=/usr/bin:/bin", "MUSTER_JOB_ID=j-1", "CUDA_VISIBLE_DEVICES=0,1"}
			start := time.Now()
			err := runHealthCommand(context.Background(), tt.cmd, tt.timeout, nil, "", env)
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("took %s", took)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.wantErr)
			}
			for _, part := range strings.Split(tt.wantErr, "|") {
				if !strings.Contains(err.Error(), strings.TrimSpace(part)) {
					t.Fatalf("error %q, want it to hold %q", err, part)
				}
			}
		})
	}
}

// A health command that times out takes its whole process group with it.
func TestRunHealthCommandKillsItsGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	err := runHealthCommand(context.Background(), "sleep 60 & echo $! > "+pidFile+"; wait", 300*time.Millisecond, nil, "", nil)
	if err == nil || !strings.Contains(err.Error(), "did not exit within") {
		t.Fatalf("error %v", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, c := range strings.TrimSpace(string(b)) {
		pid = pid*10 + int(c-'0')
	}
	testwait.Until(t, 10*time.Second, fmt.Sprintf("the command's child %d to end with it", pid), func() bool { return syscall.Kill(pid, 0) != nil })
}
