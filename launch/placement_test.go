package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// A job on hosts node-2 and node-0 waits for node-2, which is listed but not
// there yet, never takes node-1, and gives node-2 node rank 0 once it comes.
func TestRunWaitsForListedHost(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, nil) // node-0 on 127.0.0.2, node-1 on 127.0.0.3
	var stdout, stderr testfixture.Buffer
	done := make(chan int, 1)
	go func() {
		code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
			Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte("echo $MUSTER_NODE_RANK $MASTER_ADDR")},
				Nnodes: 2, Hosts: []string{"node-2", "node-0"}, WaitTimeoutMs: time.Minute.Milliseconds(), KillTimeoutMs: 1000},
			Stdout: &stdout, Stderr: &stderr, TagOutput: true,
		})
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	const waiting = "muster: waiting for nodes: 1 of 2 ready (node-0); 1 missing; not usable: listed host node-2 is not registered"
	testwait.UntilShowing(t, 20*time.Second, "progress naming node-2",
		func() bool { return strings.Contains(stderr.String(), waiting) }, stderr.String)
	tc.AddAgent(t, nil) // node-2 on 127.0.0.4
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	sort.Strings(lines)
	if got := strings.Join(lines, "|"); got != "[0] 0 127.0.0.4|[1] 1 127.0.0.4" {
		t.Fatalf("stdout %q", stdout.String())
	}
}

func TestPlacementApply(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	even := write("even", "a slots=2\nb slots=2\n")
	uneven := write("uneven", "a slots=2\nb\n")
	tests := []struct {
		name       string
		p          Placement
		nnodes     int32
		wantHosts  string
		wantNodes  int32
		wantNProc  int32
		wantExcl   string
		wantErrAll string // the whole usage error, when one is wanted
	}{
		{"nothing", Placement{}, 1, "", 1, 0, "", ""},
		{"-H sets nodes and slots", Placement{Hosts: "a:4,b:4", HostsSet: true}, 1, "a b", 2, 4, "", ""},
		{"-H without slots: one each", Placement{Hosts: "a,b,c", HostsSet: true}, 1, "a b c", 3, 1, "", ""},
		{"-n fewer than the hosts", Placement{Hosts: "a,b,c", HostsSet: true, NNodesSet: true}, 2, "a b c", 2, 1, "", ""},
		{"--nproc overrides slots", Placement{Hosts: "a:2,b:4", HostsSet: true, WorkersSet: true}, 1, "a b", 2, 0, "", ""},
		{"--hostfile", Placement{Hostfile: even, HostfileSet: true}, 1, "a b", 2, 2, "", ""},
		{"--exclude alone", Placement{Exclude: "x, y", ExcludeSet: true}, 3, "", 3, 0, "x y", ""},
		{"-H and --hostfile", Placement{Hosts: "a", HostsSet: true, Hostfile: even, HostfileSet: true}, 1, "", 0, 0, "",
			"-H and --hostfile: give one"},
		{"empty -H", Placement{Hosts: " ", HostsSet: true}, 1, "", 0, 0, "", "-H: empty host list"},
		{"empty --hostfile", Placement{HostfileSet: true}, 1, "", 0, 0, "", "--hostfile: empty file name"},
		{"empty --exclude entry", Placement{Exclude: "a,,b", ExcludeSet: true}, 1, "", 0, 0, "", `--exclude: empty entry in "a,,b"`},
		{"excluded host listed", Placement{Hosts: "a,b", HostsSet: true, Exclude: "b", ExcludeSet: true}, 1, "", 0, 0, "",
			"-H lists b, which --exclude removes"},
		{"more nodes than hosts", Placement{Hostfile: even, HostfileSet: true, NNodesSet: true}, 3, "", 0, 0, "",
			"--nnodes 3 is more than the 2 hosts --hostfile " + even + " lists"},
		{"-H slots differ", Placement{Hosts: "a:2,b:4", HostsSet: true}, 1, "", 0, 0, "",
			"muster runs the same number of workers on every node, but -H gives a:2 and b:4: give every host the same slots, or --nproc"},
		{"hostfile slots differ", Placement{Hostfile: uneven, HostfileSet: true}, 1, "", 0, 0, "",
			"muster runs the same number of workers on every node, but --hostfile " + uneven +
				" gives a slots=2 and b without slots: give every host the same slots, or --nproc"},
		{"too many slots", Placement{Hosts: "a:5000", HostsSet: true}, 1, "", 0, 0, "",
			"-H gives a:5000, more workers per node than " + strconv.Itoa(jobspec.MaxNProc)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &musterv1.JobSpec{Nnodes: tt.nnodes}
			err := tt.p.Apply(spec)
			if tt.wantErrAll != "" {
				var u *UsageError
				if !errors.As(err, &u) || err.Error() != tt.wantErrAll {
					t.Fatalf("error %v, want the usage error %q", err, tt.wantErrAll)
				}
				return
			}
			if err != nil || strings.Join(spec.Hosts, " ") != tt.wantHosts || spec.Nnodes != tt.wantNodes ||
				spec.Nproc != tt.wantNProc || strings.Join(spec.Exclude, " ") != tt.wantExcl {
				t.Fatalf("error %v, spec %v; want hosts %q, %d nodes, nproc %d, exclude %q",
					err, spec, tt.wantHosts, tt.wantNodes, tt.wantNProc, tt.wantExcl)
			}
		})
	}
}
