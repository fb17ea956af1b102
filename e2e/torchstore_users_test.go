package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A job's TCPStore is its own: from another host only the job's nodes
// reach it, and on its node only processes of the job's user.
func TestNetnsTorchStoreServesOnlyItsJob(t *testing.T) {
	t.Parallel()
	probe := testProgram(t, "storeprobe")
	nw := newNetwork(t, 3)
	nw.startCluster()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-torchstore-users", time.Now().UnixNano())
	args := []string{"netns", "exec", nw.hosts[0].ns, launcherBin, "run", "--cluster", nw.store(), "--token-file", nw.token,
		"--tls-ca", nw.ca, "-H", "a,b", "--no-tag-output", "-x", marker, "--", "sh", "-c",
		`[ "$RANK" = 0 ] && echo "$MASTER_ADDR $MASTER_PORT"; exec sleep 1000`}
	cmd := exec.Command("ip", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
	}()
	var addr string
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("rank 0 printed %q", line)
		}
		addr = net.JoinHostPort(f[0], f[1])
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}
	for _, tt := range []struct {
		name string
		host string
		as   []string // setpriv's arguments, or none to run as root
		ok   bool
	}{
		{"the job's user on its node", "a", nil, true},
		{"another node of the job", "b", nil, true},
		{"a host that is not the job's", "c", nil, false},
		{"another user on the job's node", "a", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			argv := append(append([]string{"netns", "exec", nw.host(tt.host).ns}, tt.as...), probe, addr)
			out, err := exec.Command("ip", argv...).CombinedOutput()
			// Refused is the store closing the connection, not a probe that could not run.
			want := "ok\n"
			if !tt.ok {
				want = "refused: "
			}
			if !strings.HasPrefix(string(out), want) {
				t.Fatalf("from %s: %v %q, want %q", tt.host, err, out, want)
			}
		})
	}
}
