package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	"github.com/musterhq/muster/eventfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testfixture"
)

// --events gets every step of the job, a line each, at the size users run
// (64 workers); a file whose writing fails leaves a succeeded job with
// exit code 1.
func TestEventsFile(t *testing.T) {
	tc := agenttest.NewCluster(t, 1, nil)
	for _, tt := range []struct {
		name   string
		file   string // "" for one in a temporary directory
		code   int
		stderr string
	}{
		{"written", "", 0, ""},
		{"full disk", "/dev/full", 1, "but its events file is incomplete: --events /dev/full: write /dev/full: no space left on device; exit code 1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.file
			if name == "" {
				name = filepath.Join(t.TempDir(), "events.jsonl")
			}
			events, err := eventfile.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer events.Close()
			const workers = 64
			var stdout, stderr testfixture.Buffer
			code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
				Spec:   &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 1, Nproc: workers, KillTimeoutMs: 1000},
				Stdout: &stdout, Stderr: &stderr, Events: events,
			})
			if err != nil || code != tt.code || !strings.HasSuffix(stderr.String(), tt.stderr) {
				t.Fatalf("exit %d, %v; stderr %q, want it to end in %q", code, err, stderr.String(), tt.stderr)
			}
			if tt.file != "" {
				return
			}
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			counts := map[string]int{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var h eventfile.Header
				if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				counts[h.Type]++
			}
			want := map[string]int{"submitted": 1, "round_started": 1, "worker_started": workers, "worker_exited": workers, "ended": 1}
			if len(counts) != len(want) {
				t.Fatalf("lines by type %v, want %v", counts, want)
			}
			for k, n := range want {
				if counts[k] != n {
					t.Fatalf("lines by type %v, want %v", counts, want)
				}
			}
		})
	}
}
