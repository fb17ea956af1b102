package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/musterhq/muster/replica"
	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
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
// flags from the environment file, its cgroup subtree delegated for the
// workers' memory cgroups, and nothing that hides the GPUs.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, "../deploy/systemd/muster-agent.service")
	for k, want := range map[string]string{"Type": "notify", "Restart": "on-failure", "EnvironmentFile": "/etc/muster/agent.env",
		"ExecStart": "/usr/local/bin/agent", "KillMode": "mixed", "LimitMEMLOCK": "infinity",
		"StateDirectory": "muster", "Delegate": "yes"} {
		if got := strings.Join(u[k], " "); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	// The agent says READY before it waits for its store; a start that
	// could never time out would hide an agent that never says it.
	if v := strings.Join(u["TimeoutStartSec"], " "); v == "infinity" || v == "0" {
		t.Errorf("TimeoutStartSec=%s: systemctl start would wait for ever on an agent that never starts", v)
	}
	for _, k := range []string{"PrivateDevices", "DevicePolicy", "DeviceAllow", "NoNewPrivileges", "PrivateNetwork",
		"RestrictAddressFamilies", "CapabilityBoundingSet", "ProtectSystem"} {
		if v, ok := u[k]; ok {
			t.Errorf("%s=%v would keep workers from their GPUs, network or users", k, v)
		}
	}
}

// systemd itself accepts the unit, its agent the one the tests built:
// no unknown key, no bad value.
func TestSystemdUnitVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed: the unit is not checked by systemd")
	}
	data, err := os.ReadFile("../deploy/systemd/muster-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "muster-agent.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(data, []byte("/usr/local/bin/agent"), []byte(agentBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput()
	// verify warns of unknown keys and still exits 0; it also speaks of
	// the machine's other units, which are not this test's.
	var ours []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "muster-agent.service") {
			ours = append(ours, l)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(ours, "\n"))
	}
}

// Under systemd (NOTIFY_SOCKET) the agent says READY=1 while it still waits
// for a head that is down: `systemctl enable --now` must not hang with it.
func TestAgentNotifiesReadyWhileItsHeadIsDown(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "muster-e2e-notify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	down := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
	cmd := exec.Command(agentBin, "--join", down, "--bind", "127.0.0.1:0")
	cmd.Env = agentEnv("NOTIFY_SOCKET=" + sock)
	var errb testfixture.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cmd, "the agent", errb.String)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no READY=1 from an agent whose head %s is down: %v; log:\n%s", down, err, errb.String())
		}
		if msg := string(buf[:n]); strings.Contains(msg, "READY=1") {
			if !strings.Contains(msg, "STATUS=") {
				t.Errorf("READY without a STATUS line: %q", msg)
			}
			return
		}
	}
}

// SIGHUP stops the agent as SIGTERM does: its workers get SIGTERM and
// their grace, and the agent exits 0 rather than dying of the signal.
func TestAgentStopsGracefullyOnSIGHUP(t *testing.T) {
	t.Parallel()
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--kill-timeout", "10s"})
	dir := t.TempDir()
	cmd := exec.Command(launcherBin, "run", "--cluster", ap.addr, "--", "sh", "-c",
		`trap 'touch `+dir+`/term; exit 0' TERM; echo started; while :; do sleep 0.1; done`)
	var out testfixture.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testwait.Until(t, 20*time.Second, "the worker to start", func() bool { return strings.Contains(out.String(), "started") })
	ap.cmd.Process.Signal(syscall.SIGHUP)
	exited := make(chan struct{})
	go func() { ap.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not stop on SIGHUP; log:\n%s", ap.log())
	}
	if st := ap.cmd.ProcessState; !st.Exited() || st.ExitCode() != 0 {
		t.Errorf("the agent ended with %v on SIGHUP, want exit 0 after a graceful stop; log:\n%s", st, ap.log())
	}
	if _, err := os.Stat(filepath.Join(dir, "term")); err != nil {
		t.Errorf("the worker got no SIGTERM: %v", err)
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

// The environment file's replica example holds together: MUSTER_LISTEN is
// among MUSTER_STORE_PEERS, a list the agent accepts, and every node
// gossips with each replica's host.
func TestSystemdEnvironmentFileReplicas(t *testing.T) {
	data, err := os.ReadFile("../deploy/systemd/agent.env")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if m := regexp.MustCompile(`^#?(MUSTER_[A-Z_]+)=(.*)$`).FindStringSubmatch(l); m != nil {
			vars[m[1]] = m[2]
		}
	}
	peers := strings.Split(vars["MUSTER_STORE_PEERS"], ",")
	if err := replica.CheckPeers(peers); err != nil || len(peers) < 3 {
		t.Fatalf("MUSTER_STORE_PEERS=%s: %v, want 3 replicas or more", vars["MUSTER_STORE_PEERS"], err)
	}
	if !slices.Contains(peers, vars["MUSTER_LISTEN"]) {
		t.Errorf("MUSTER_LISTEN=%s is not among MUSTER_STORE_PEERS=%s", vars["MUSTER_LISTEN"], vars["MUSTER_STORE_PEERS"])
	}
	join := strings.Split(vars["MUSTER_JOIN"], ",")
	for _, p := range peers {
		if host, _, _ := net.SplitHostPort(p); !slices.Contains(join, host) {
			t.Errorf("MUSTER_JOIN=%s does not gossip with the replica %s", vars["MUSTER_JOIN"], p)
		}
	}
}

// shCommands are the command lines of a docs page's sh blocks, continued
// lines joined, comments dropped, each `a && b` split in two.
func shCommands(t *testing.T, page string) [][]string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		for _, l := range strings.Split(strings.ReplaceAll(block[1], "\\\n", " "), "\n") {
			l, _, _ = strings.Cut(l, " #")
			if strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			words := shellWords(l)
			for len(words) > 0 {
				i := slices.Index(words, "&&")
				if i < 0 {
					i = len(words)
				}
				out = append(out, words[:i])
				words = words[min(i+1, len(words)):]
			}
		}
	}
	return out
}

// Every agent command line of the bare-metal and operations pages uses
// flags the agent has, and a replica's holds together as the agent
// requires: --listen among --store-peers, --tls-ca with TLS.
func TestDocsAgentCommandLines(t *testing.T) {
	help, err := exec.Command(agentBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("agent --help: %v\n%s", err, help)
	}
	replicas := 0
	for _, page := range []string{"../docs/bare-metal.md", "../docs/operations.md"} {
		for _, words := range shCommands(t, page) {
			if len(words) > 0 && words[0] == "sudo" {
				words = words[1:]
			}
			if len(words) == 0 || words[0] != "agent" {
				continue
			}
			line := strings.Join(words, " ")
			flags := map[string]string{}
			for i, w := range words[1:] {
				if !strings.HasPrefix(w, "--") {
					continue
				}
				name, value, ok := strings.Cut(strings.TrimPrefix(w, "--"), "=")
				if !ok && i+2 < len(words) && !strings.HasPrefix(words[i+2], "--") {
					value = words[i+2]
				}
				flags[name] = value
				if !regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `\b`).Match(help) {
					t.Errorf("%s: agent --help does not name --%s: %s", page, name, line)
				}
			}
			peers, ok := flags["store-peers"]
			if !ok {
				continue
			}
			replicas++
			list := strings.Split(peers, ",")
			if err := replica.CheckPeers(list); err != nil {
				t.Errorf("%s: --store-peers %s: %v", page, peers, err)
			}
			if !slices.Contains(list, flags["listen"]) {
				t.Errorf("%s: --listen %q is not among --store-peers %s: %s", page, flags["listen"], peers, line)
			}
			if _, tls := flags["tls-cert"]; tls && flags["tls-ca"] == "" {
				t.Errorf("%s: a replica with TLS needs --tls-ca: %s", page, line)
			}
		}
	}
	if replicas == 0 {
		t.Errorf("no agent command line with --store-peers in the bare-metal and operations pages")
	}
}

// agentRunFlags is `agent run`'s contract: each flag, and whether it takes a value.
func agentRunFlags() map[string]bool {
	return map[string]bool{"rdzv": true, "rdzv-host": false, "nnodes": true, "gpus": true, "nproc": true,
		"node-rank": true, "max-restarts": true, "join-timeout": true, "last-call": true, "kill-timeout": true,
		"dry-run": false, "token-file": true, "metrics-addr": true}
}

// agentRunEnv is the variables `agent run` reads.
func agentRunEnv() []string {
	return []string{"MUSTER_RDZV", "MUSTER_NNODES", "MUSTER_GPUS", "MUSTER_NPROC", "MUSTER_AGENT_NODE_RANK",
		"MUSTER_MAX_RESTARTS", "MUSTER_JOIN_TIMEOUT", "MUSTER_LAST_CALL", "MUSTER_KILL_TIMEOUT", "MUSTER_TOKEN", "MUSTER_TOKEN_FILE",
		"MUSTER_METRICS_ADDR"}
}

// shellWords splits a command line as sh does for plain words and quotes.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			w.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				w.WriteByte(s[i])
				in = true
			}
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// agentRun is one `agent run` command line: its flags and the job's command.
type agentRun struct {
	flags   map[string]string
	command []string
}

// parseAgentRun finds `agent run` in words and parses its flags up to the
// "--" before the job's command.
func parseAgentRun(t *testing.T, where string, words []string) agentRun {
	t.Helper()
	i := slices.IndexFunc(words, func(w string) bool { return w == "agent" || strings.HasSuffix(w, "/agent") })
	if i < 0 || i+1 >= len(words) || words[i+1] != "run" {
		t.Fatalf("%s: no `agent run` in %q", where, words)
	}
	contract := agentRunFlags()
	r := agentRun{flags: map[string]string{}}
	for rest := words[i+2:]; ; rest = rest[1:] {
		if len(rest) == 0 {
			t.Fatalf("%s: no -- before the job's command in %q", where, words)
		}
		if rest[0] == "--" {
			r.command = rest[1:]
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(rest[0], "-"), "=")
		takesValue, ok := contract[name]
		if !ok {
			t.Errorf("%s: agent run has no flag --%s", where, name)
		}
		if ok && takesValue && !hasValue {
			if len(rest) < 2 {
				t.Fatalf("%s: --%s needs a value", where, name)
			}
			rest, value = rest[1:], rest[1]
		}
		r.flags[name] = value
	}
	if len(r.command) == 0 {
		t.Errorf("%s: no command after --", where)
	}
	return r
}

// checkEnv fails t for a MUSTER_ variable that agent run does not read.
func checkEnv(t *testing.T, where string, names ...string) {
	t.Helper()
	for _, n := range names {
		if strings.HasPrefix(n, "MUSTER_") && !slices.Contains(agentRunEnv(), n) {
			t.Errorf("%s sets %s, which agent run does not read", where, n)
		}
	}
}

// killTimeout is the kill timeout an agent run gets: its flag, else the
// variable, else the default.
func killTimeout(t *testing.T, r agentRun, env map[string]string) time.Duration {
	t.Helper()
	s := r.flags["kill-timeout"]
	if s == "" {
		s = env["MUSTER_KILL_TIMEOUT"]
	}
	if s == "" {
		return 10 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("kill timeout %q: %v", s, err)
	}
	return d
}

// readYAML decodes each document of a YAML file.
func readYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []map[string]any
	for dec := yaml.NewDecoder(f); ; {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

// at follows keys and list indices into a decoded YAML value.
func at(v any, path ...any) any {
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k < 0 || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// strs is a decoded YAML list of strings.
func strs(v any) []string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(string))
	}
	return out
}

// The Dockerfile's base images are build arguments, its final stage has
// both binaries in /usr/local/bin, and it, the README and the containers
// page say how to add them to one's own image.
func TestDeployDockerfile(t *testing.T) {
	data, err := os.ReadFile("../deploy/docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	copyLine := "COPY --from=muster /usr/local/bin/agent /usr/local/bin/launcher /usr/local/bin/"
	texts := map[string]string{"the Dockerfile": df}
	for _, doc := range []string{"README.md", "docs/containers.md"} {
		text, err := os.ReadFile("../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		texts[doc] = string(text)
	}
	for what, text := range texts {
		if !strings.Contains(text, copyLine) {
			t.Errorf("%s does not show %q", what, copyLine)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ARG GO_IMAGE=golang:\S+\n(?:.*\n)*ARG BASE_IMAGE=\S+\n(?:.*\n)*FROM \$\{GO_IMAGE\} AS build$`),
		regexp.MustCompile(`(?m)^FROM \$\{BASE_IMAGE\}\nCOPY --from=build /out/agent /out/launcher /usr/local/bin/$`),
		regexp.MustCompile(`(?m)^ENV CGO_ENABLED=1$`),
	} {
		if !want.MatchString(df) {
			t.Errorf("the Dockerfile does not match %s", want)
		}
	}
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil || !regexp.MustCompile(`(?m)^\.git$`).Match(ignore) {
		t.Errorf(".dockerignore leaves .git in the build context (%v)", err)
	}
}

// The compose file's two nodes run the same line, need a token from the
// environment, have the agent as PID 1 and give it time to stop its job;
// docker-compose itself accepts it.
func TestComposeFile(t *testing.T) {
	const path = "../deploy/compose/docker-compose.yml"
	docs := readYAML(t, path)
	if len(docs) != 1 {
		t.Fatalf("%d documents in %s", len(docs), path)
	}
	services, _ := docs[0]["services"].(map[string]any)
	if len(services) != 2 || services["node-0"] == nil || services["node-1"] == nil {
		t.Fatalf("services %v, want node-0 and node-1", services)
	}
	var commands []string
	for name, s := range services {
		where := path + ": " + name
		command, _ := at(s, "command").(string)
		commands = append(commands, command)
		r := parseAgentRun(t, where, shellWords(command))
		if !strings.HasPrefix(r.flags["rdzv"], "node-0:") {
			t.Errorf("%s: --rdzv %q, want node-0's", where, r.flags["rdzv"])
		}
		if h := at(s, "hostname"); h != name {
			t.Errorf("%s: hostname %v", where, h)
		}
		if init, ok := at(s, "init").(bool); !ok || init {
			t.Errorf("%s: init %v, want false: the agent is PID 1", where, at(s, "init"))
		}
		env, _ := at(s, "environment").(map[string]any)
		if tok, _ := env["MUSTER_TOKEN"].(string); !strings.HasPrefix(tok, "${MUSTER_TOKEN:?") {
			t.Errorf("%s: MUSTER_TOKEN is %q, want ${MUSTER_TOKEN:?...}: a token every user must set", where, tok)
		}
		names := map[string]string{}
		for k, v := range env {
			names[k], _ = v.(string)
			checkEnv(t, where, k)
		}
		grace, err := time.ParseDuration(at(s, "stop_grace_period").(string))
		if kt := killTimeout(t, r, names); err != nil || grace <= kt {
			t.Errorf("%s: stop_grace_period %v (%v), want more than the kill timeout %v", where, grace, err, kt)
		}
	}
	if commands[0] != commands[1] {
		t.Errorf("the nodes' commands differ:\n%s\n%s", commands[0], commands[1])
	}

	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose is not installed: the file is not checked by it")
	}
	config := func(env ...string) ([]byte, error) {
		cmd := exec.Command("docker-compose", "--file", path, "config")
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "MUSTER_") }), env...)
		return cmd.CombinedOutput()
	}
	if out, err := config(); err == nil || !bytes.Contains(out, []byte("set MUSTER_TOKEN")) {
		t.Errorf("docker-compose config without MUSTER_TOKEN: %v, want an error naming it\n%s", err, out)
	}
	out, err := config("MUSTER_TOKEN=0123456789abcdef-compose")
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	if n := bytes.Count(out, []byte("MUSTER_TOKEN: 0123456789abcdef-compose")); n != 2 {
		t.Errorf("the token is given to %d services, want 2:\n%s", n, out)
	}
}

// The Kubernetes manifest: a headless Service and an indexed Job whose
// pods are named by it, the token from a Secret, the rendezvous given once,
// GPUs requested, and a grace period longer than the agent's kill timeout.
func TestKubernetesIndexedJob(t *testing.T) {
	const path = "../deploy/kubernetes/indexed-job.yaml"
	docs := readYAML(t, path)
	var svc, job map[string]any
	for _, d := range docs {
		switch d["kind"] {
		case "Service":
			svc = d
		case "Job":
			job = d
		case "Secret":
			t.Errorf("%s holds a Secret: a token written in a file is everyone's", path)
		default:
			t.Errorf("%s: unexpected kind %v", path, d["kind"])
		}
	}
	if svc == nil || job == nil {
		t.Fatalf("%s: want a Service and a Job, have %d documents", path, len(docs))
	}
	svcName, jobName := at(svc, "metadata", "name"), at(job, "metadata", "name")
	if at(svc, "spec", "clusterIP") != "None" {
		t.Errorf("Service clusterIP %v, want None (headless)", at(svc, "spec", "clusterIP"))
	}
	if at(svc, "spec", "selector", "batch.kubernetes.io/job-name") != jobName {
		t.Errorf("Service selector %v, want the Job %v", at(svc, "spec", "selector"), jobName)
	}
	spec := at(job, "spec").(map[string]any)
	if spec["completionMode"] != "Indexed" || spec["completions"] != 2 || spec["parallelism"] != 2 {
		t.Errorf("Job: completionMode %v, completions %v, parallelism %v; want Indexed, 2, 2",
			spec["completionMode"], spec["completions"], spec["parallelism"])
	}
	pod := at(spec, "template", "spec")
	if at(pod, "subdomain") != svcName {
		t.Errorf("pod subdomain %v, want the Service's name %v", at(pod, "subdomain"), svcName)
	}
	containers := at(pod, "containers").([]any)
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0]
	words := strs(at(c, "command"))
	if a := at(c, "args"); a != nil {
		words = append(words, strs(a)...)
	}
	r := parseAgentRun(t, path, words)
	env := map[string]string{}
	for _, e := range at(c, "env").([]any) {
		name := at(e, "name").(string)
		env[name], _ = at(e, "value").(string)
		checkEnv(t, path, name)
	}
	if want := jobName.(string) + "-0." + svcName.(string) + ":29400"; env["MUSTER_RDZV"] != want || r.flags["rdzv"] != "" {
		t.Errorf("MUSTER_RDZV %q, --rdzv %q; want MUSTER_RDZV=%s only", env["MUSTER_RDZV"], r.flags["rdzv"], want)
	}
	if at(c, "env", slices.IndexFunc(at(c, "env").([]any), func(e any) bool { return at(e, "name") == "MUSTER_TOKEN" }), "valueFrom", "secretKeyRef", "key") == nil {
		t.Errorf("MUSTER_TOKEN does not come from a Secret")
	}
	gpus := at(c, "resources", "limits", "nvidia.com/gpu")
	if gpus == nil || r.flags["gpus"] == "" || r.flags["gpus"] != fmt.Sprint(gpus) {
		t.Errorf("nvidia.com/gpu limit %v, --gpus %q: want the same", gpus, r.flags["gpus"])
	}
	grace, _ := at(pod, "terminationGracePeriodSeconds").(int)
	if kt := killTimeout(t, r, env); time.Duration(grace)*time.Second <= kt {
		t.Errorf("terminationGracePeriodSeconds %d, want more than the kill timeout %v", grace, kt)
	}

	// Each pod's own line, with the manifest's environment and the index
	// Kubernetes gives it, must plan a node of the whole job.
	completions, _ := spec["completions"].(int)
	for index := range completions {
		vars := []string{"PATH=" + os.Getenv("PATH"), "JOB_COMPLETION_INDEX=" + fmt.Sprint(index)}
		for name, value := range env {
			if name == "MUSTER_TOKEN" {
				value = "0123456789abcdef-kubernetes" // the Secret's
			}
			vars = append(vars, name+"="+value)
		}
		args := append([]string{"run", "--dry-run"}, words[slices.Index(words, "run")+1:]...)
		cmd := exec.Command(agentBin, args...)
		cmd.Env = vars
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("pod %d: agent %s: %v\n%s", index, strings.Join(args, " "), err, out)
			continue
		}
		for _, want := range []string{
			"platform: kubernetes-indexed-job",
			fmt.Sprintf("nodes: %d ", completions),
			fmt.Sprintf("node rank: %d (JOB_COMPLETION_INDEX)", index),
			"rendezvous: " + env["MUSTER_RDZV"],
			"per node: " + fmt.Sprint(gpus) + " GPUs",
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("pod %d: agent run --dry-run does not say %q:\n%s", index, want, out)
			}
		}
	}
}

// The Slurm batch script is valid bash and starts one agent per node with
// srun, which it execs (a signal for the batch shell reaches the steps), the
// token made in the script. TestSlurmBatchJob runs it under Slurm.
func TestSlurmBatch(t *testing.T) {
	const path = "../deploy/slurm/muster.sbatch"
	if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", path, err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(data), "\\\n", " ")
	if !regexp.MustCompile(`(?m)^#SBATCH --nodes=2$`).MatchString(script) {
		t.Errorf("no #SBATCH --nodes=2")
	}
	var sruns int
	for _, l := range strings.Split(script, "\n") {
		words := shellWords(l)
		if i := slices.Index(words, "srun"); i < 0 || i > 1 {
			continue
		}
		sruns++
		if words[0] != "exec" {
			t.Errorf("srun without exec: a signal for the batch shell would kill it: %s", l)
		}
		if !slices.Contains(words, "--ntasks-per-node=1") {
			t.Errorf("srun without --ntasks-per-node=1: one agent per node: %s", l)
		}
		parseAgentRun(t, path, words)
	}
	if sruns != 1 {
		t.Errorf("%d srun lines, want 1", sruns)
	}
	if !regexp.MustCompile(`(?m)^export MUSTER_TOKEN\b`).MatchString(script) {
		t.Errorf("the script does not give the agents a token in MUSTER_TOKEN")
	}
}

// The dstack task runs nccl-tests on two nodes, every node the same agent
// run line, the token from the environment of dstack apply.
func TestDstackTask(t *testing.T) {
	const path = "../deploy/dstack/nccl-tests.dstack.yml"
	docs := readYAML(t, path)
	if len(docs) != 1 {
		t.Fatalf("%d documents in %s", len(docs), path)
	}
	task := docs[0]
	if task["type"] != "task" || task["nodes"] != 2 || at(task, "resources", "gpu") == nil {
		t.Errorf("type %v, nodes %v, resources.gpu %v; want task, 2, GPUs", task["type"], task["nodes"], at(task, "resources", "gpu"))
	}
	commands := strs(task["commands"])
	if len(commands) != 1 {
		t.Fatalf("commands %q, want one agent run line", commands)
	}
	r := parseAgentRun(t, path, shellWords(commands[0]))
	if strings.Join(r.command[:min(3, len(r.command))], " ") != "launcher bench allreduce" {
		t.Errorf("the job runs %q, want launcher bench allreduce", r.command)
	}
	env := strs(task["env"])
	if !slices.Contains(env, "MUSTER_TOKEN") {
		t.Errorf("env %q does not pass MUSTER_TOKEN from dstack apply's environment", env)
	}
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		checkEnv(t, path, name)
	}
}

// Once agent run is built, its help names every flag the deploy files use.
func TestDeployFlagsInAgentRunHelp(t *testing.T) {
	help, err := exec.Command(agentBin, "run", "--help").CombinedOutput()
	if err != nil || !bytes.Contains(help, []byte("--rdzv")) {
		t.Skipf("agent run --help: %v: agent run is not built yet", err)
	}
	for name := range agentRunFlags() {
		if !bytes.Contains(help, []byte("--"+name)) {
			t.Errorf("agent run --help does not name --%s", name)
		}
	}
	for _, v := range agentRunEnv() {
		if !bytes.Contains(help, []byte(v)) {
			t.Errorf("agent run --help does not name %s", v)
		}
	}
}
