package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// readUnit reads a systemd unit's Key=Value lines, continuation lines
// joined; a key given twice keeps both values.
func readUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	var line string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") || l == "" {
			continue
		}
		line += l
		if strings.HasSuffix(line, "\\") {
			line = strings.TrimSuffix(line, "\\") + " "
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=Value", path, line)
		}
		out[k] = append(out[k], v)
		line = ""
	}
	return out
}

// The unit is one for every node: notify, restarted on failure, its
// flags from the environment file, and nothing that hides the GPUs.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, "../deploy/systemd/muster-agent.service")
	for k, want := range map[string]string{"Type": "notify", "Restart": "on-failure", "EnvironmentFile": "/etc/muster/agent.env",
		"ExecStart": "/usr/local/bin/agent", "KillMode": "mixed", "LimitMEMLOCK": "infinity"} {
		if got := strings.Join(u[k], " "); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"PrivateDevices", "DevicePolicy", "DeviceAllow", "NoNewPrivileges", "PrivateNetwork",
		"RestrictAddressFamilies", "CapabilityBoundingSet", "ProtectSystem"} {
		if v, ok := u[k]; ok {
			t.Errorf("%s=%v would keep workers from their GPUs, network or users", k, v)
		}
	}
}

// Every variable the environment file sets, or shows commented out, is
// one the agent reads.
func TestSystemdEnvironmentFile(t *testing.T) {
	help, err := exec.Command(agentBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("agent --help: %v\n%s", err, help)
	}
	data, err := os.ReadFile("../deploy/systemd/agent.env")
	if err != nil {
		t.Fatal(err)
	}
	assign := regexp.MustCompile(`^#?(MUSTER_[A-Z_]+)=`)
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		m := assign.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n++
		if !strings.Contains(string(help), "$"+m[1]) {
			t.Errorf("agent.env sets %s, which agent --help does not name", m[1])
		}
	}
	if n < 5 {
		t.Fatalf("only %d variables in agent.env", n)
	}
}
