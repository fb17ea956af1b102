package testfixture

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerEnv marks the environment of the processes a test binary starts, so
// that those orphaned to init are still known as its own.
const ownerEnv = "TESTFIXTURE_OWNER"

// MarkProcesses, called first in a TestMain, marks every process the tests
// start and that inherits their environment as this binary's.
func MarkProcesses() {
	os.Setenv(ownerEnv, strconv.Itoa(os.Getpid()))
}

// Process is a live process that a test binary started.
type Process struct {
	Pid     int
	Cmdline string
}

func (p Process) String() string { return fmt.Sprintf("%d %s", p.Pid, p.Cmdline) }

// LeftProcesses lists the live processes this binary started, however far
// down: those whose parents lead to it, those in its process group when it
// leads one, and those of its mark (MarkProcesses). Zombies, which ended and
// wait to be reaped, are not listed.
func LeftProcesses() []Process {
	self := os.Getpid()
	mark := []byte(ownerEnv + "=" + strconv.Itoa(self) + "\x00")
	leader := syscall.Getpgrp() == self
	type stat struct{ ppid, pgrp int }
	stats := map[int]stat{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		// After the command's name, in parentheses: state, parent, group.
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		stats[pid] = stat{ppid, pgrp}
	}
	ours := func(pid int) bool {
		if leader && stats[pid].pgrp == self {
			return true
		}
		for p, n := stats[pid].ppid, 0; p > 1 && n < len(stats)+1; p, n = stats[p].ppid, n+1 {
			if p == self {
				return true
			}
		}
		env, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		return bytes.Contains(append([]byte{0}, env...), append([]byte{0}, mark...))
	}
	var left []Process
	for pid := range stats {
		if ours(pid) {
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			left = append(left, Process{Pid: pid, Cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))})
		}
	}
	return left
}

// EndLeftProcesses, for a TestMain once its tests ran: it waits up to grace
// for the processes they started to end, then kills those left and says
// which they were, one a line; empty when none was left.
func EndLeftProcesses(grace time.Duration) string {
	deadline := time.Now().Add(grace)
	left := LeftProcesses()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		left = LeftProcesses()
	}
	var out strings.Builder
	for _, p := range left {
		syscall.Kill(p.Pid, syscall.SIGKILL)
		fmt.Fprintln(&out, p)
	}
	return out.String()
}

// CheckNoneLeft runs a TestMain's tests and fails the binary, listing them,
// when processes they started outlive them by grace; it kills those.
func CheckNoneLeft(run func() int, grace time.Duration) int {
	MarkProcesses()
	code := run()
	if left := EndLeftProcesses(grace); left != "" {
		fmt.Fprintf(os.Stderr, "processes the tests started and left running:\n%s", left)
		if code == 0 {
			code = 1
		}
	}
	return code
}
