package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestChooseTarget(t *testing.T) {
	const local = "unix:///run/muster/agent.sock"
	tests := []struct {
		name      string
		embedded  bool
		cluster   string
		localUp   bool
		want      string
		wantUsage string // the usage error's start, when one is wanted
	}{
		{"nothing runs here: embedded", false, "", false, "", ""},
		{"a local agent takes it", false, "", true, local, ""},
		{"--embedded passes the local agent by", true, "", true, "", ""},
		{"--cluster", false, "10.0.0.1:29400", true, "10.0.0.1:29400", ""},
		{"--cluster a socket path", false, "unix:///tmp/a.sock", false, "unix:///tmp/a.sock", ""},
		{"--cluster and --embedded", true, "10.0.0.1:29400", false, "", "--embedded and --cluster (or MUSTER_CLUSTER): give one"},
		{"--cluster without a port", false, "10.0.0.1", false, "", "--cluster "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			findLocal := func() string {
				if tt.localUp {
					return local
				}
				return ""
			}
			got, err := ChooseTarget(tt.embedded, tt.cluster, findLocal)
			if tt.wantUsage != "" {
				var u *UsageError
				if !errors.As(err, &u) || !strings.HasPrefix(err.Error(), tt.wantUsage) {
					t.Fatalf("error %v, want a usage error starting %q", err, tt.wantUsage)
				}
				return
			}
			if err != nil || got.Store != tt.want || got.Embedded() != (tt.want == "") {
				t.Fatalf("got %+v, %v; want store %q", got, err, tt.want)
			}
		})
	}
}

func TestTargetPrepare(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		store       string
		spec        *musterv1.JobSpec
		workersSet  bool
		wantWorkdir string
		wantWait    int64
		wantUsage   string
	}{
		{"cluster: the agent's directory, and waits", "10.0.0.1:29400", &musterv1.JobSpec{Nnodes: 4, Hosts: []string{"a"}}, false, "", 60_000, ""},
		{"local agent: this directory", "unix:///run/muster/agent.sock", &musterv1.JobSpec{Nnodes: 2}, false, cwd, 60_000, ""},
		{"local agent: --workdir kept", "unix:///run/muster/agent.sock", &musterv1.JobSpec{Workdir: []byte("/srv")}, false, "/srv", 60_000, ""},
		{"embedded: this directory, no wait", "", &musterv1.JobSpec{Nnodes: 1}, false, cwd, 0, ""},
		{"embedded: --workdir checked", "", &musterv1.JobSpec{Nnodes: 1, Workdir: []byte("/")}, false, "/", 0, ""},
		{"embedded: --workdir missing", "", &musterv1.JobSpec{Nnodes: 1, Workdir: []byte("/nonexistent/x")}, false, "", 0,
			`--workdir "/nonexistent/x" does not exist`},
		{"embedded: --workdir a file", "", &musterv1.JobSpec{Nnodes: 1, Workdir: []byte(file)}, false, "", 0,
			`--workdir "` + file + `" is not a directory`},
		{"embedded: -H", "", &musterv1.JobSpec{Nnodes: 1, Hosts: []string{"a"}}, false, "", 0, "-H, --hostfile and --exclude choose a cluster's nodes"},
		{"embedded: --exclude", "", &musterv1.JobSpec{Nnodes: 1, Exclude: []string{"a"}}, false, "", 0, "-H, --hostfile and --exclude choose a cluster's nodes"},
		{"embedded: -n 2 reads as workers", "", &musterv1.JobSpec{Nnodes: 2}, false, "", 0,
			"--nnodes 2 needs a cluster: without --cluster the launcher runs one node, this one (for 2 workers here, give -np 2),"},
		{"embedded: -n 2 with --nproc", "", &musterv1.JobSpec{Nnodes: 2}, true, "", 0,
			"--nnodes 2 needs a cluster: without --cluster the launcher runs one node, this one, "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Target{Store: tt.store}.Prepare(tt.spec, time.Minute, tt.workersSet)
			if tt.wantUsage != "" {
				var u *UsageError
				if !errors.As(err, &u) || !strings.HasPrefix(err.Error(), tt.wantUsage) {
					t.Fatalf("error %v, want a usage error starting %q", err, tt.wantUsage)
				}
				return
			}
			if err != nil || string(tt.spec.Workdir) != tt.wantWorkdir || tt.spec.WaitTimeoutMs != tt.wantWait {
				t.Fatalf("error %v, workdir %q, wait %d ms; want workdir %q, wait %d ms",
					err, tt.spec.Workdir, tt.spec.WaitTimeoutMs, tt.wantWorkdir, tt.wantWait)
			}
		})
	}
}

func TestTargetFollowing(t *testing.T) {
	for _, tt := range []struct {
		store              string
		reattach, liveness time.Duration
	}{
		{"", 0, 0}, // the embedded store lives and dies with the launcher
		{"10.0.0.1:29400", 10 * time.Minute, 2 * time.Second},
		{"unix:///run/muster/agent.sock", 10 * time.Minute, 2 * time.Second},
	} {
		tg := Target{Store: tt.store}
		if tg.Reattach() != tt.reattach || tg.Liveness() != tt.liveness {
			t.Errorf("%q: reattach %v, liveness %v; want %v, %v", tt.store, tg.Reattach(), tg.Liveness(), tt.reattach, tt.liveness)
		}
	}
}

// The cluster token goes over TCP, and over a network only with TLS; a
// Unix socket needs none: the kernel names the caller.
func TestClusterSecurity(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	t.Setenv("MUSTER_TOKEN", token)
	tests := []struct {
		name, addr, ca string
		wantToken      string
		wantUsage      string
	}{
		{"socket", "unix:///run/muster/agent.sock", "", "", ""},
		{"loopback", "127.0.0.1:29400", "", token, ""},
		{"network without TLS", "10.0.0.1:29400", "", "", "--cluster 10.0.0.1:29400: the cluster token is never sent in clear text"},
		{"network with TLS", "10.0.0.1:29400", "/etc/muster/ca.pem", token, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec, err := ClusterSecurity(tt.addr, "", tt.ca)
			if tt.wantUsage != "" {
				var u *UsageError
				if !errors.As(err, &u) || !strings.HasPrefix(err.Error(), tt.wantUsage) {
					t.Fatalf("error %v, want a usage error starting %q", err, tt.wantUsage)
				}
				return
			}
			if err != nil || sec.Token != tt.wantToken || sec.CAFile != tt.ca {
				t.Fatalf("got %+v, %v; want token %q", sec, err, tt.wantToken)
			}
		})
	}
}

// Root's embedded launcher makes --log-dir where root chose, never where a
// link another user planted in a shared directory leads.
func TestTargetPrepareLogDirPlantedLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the other user's link is made as another uid")
	}
	const hostile = 65533
	shared := t.TempDir()
	os.Chmod(shared, os.ModeSticky|0o777) // as /tmp
	theirs := t.TempDir()
	os.Chown(theirs, hostile, hostile)
	logs := filepath.Join(shared, "logs")
	if err := os.Symlink(theirs, logs); err != nil {
		t.Fatal(err)
	}
	os.Lchown(logs, hostile, hostile)
	err := Target{}.Prepare(&musterv1.JobSpec{Nnodes: 1, LogDir: []byte(logs)}, time.Minute, false)
	var u *UsageError
	if !errors.As(err, &u) || err.Error() != "--log-dir: "+logs+" is a symbolic link of uid 65533, not uid 0 or root" {
		t.Fatalf("error %v, want a usage error naming --log-dir and the link", err)
	}
}
