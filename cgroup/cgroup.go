// Package cgroup gives each worker of a job a memory cgroup of its own, under
// the agent's own cgroup, so that a memory limit holds per worker and the
// kernel's count of OOM kills in that cgroup says, without doubt, that the
// OOM killer ended the worker. It speaks cgroup v2 (memory.max,
// memory.events) and, where the memory controller is still mounted alone,
// v1 (memory.limit_in_bytes, memory.oom_control).
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is a cgroup hierarchy's version.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

// Root is the cgroup under which this process makes its jobs' cgroups: its
// own memory cgroup.
type Root struct {
	version Version
	dir     string
	// moved says that this process moved itself into a leaf of its v2
	// cgroup, so that the cgroup could hand controllers down.
	moved string
}

// Open finds this process's memory cgroup and checks that it can make
// cgroups under it. An error says why not: no memory controller, a
// read-only hierarchy, or an unprivileged process.
func Open() (*Root, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	version, dir, err := Locate(mounts, own)
	if err != nil {
		return nil, err
	}
	r := &Root{version: version, dir: dir}
	if version == V2 {
		if err := r.delegate(); err != nil {
			return nil, err
		}
	}
	probe, err := os.MkdirTemp(r.dir, "muster-probe-")
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", r.dir, err)
	}
	os.Remove(probe)
	return r, nil
}

// Version is the hierarchy's version.
func (r *Root) Version() Version { return r.version }

// Dir is the cgroup's directory.
func (r *Root) Dir() string { return r.dir }

// Moved, when not "", is the leaf cgroup this process moved itself into.
func (r *Root) Moved() string { return r.moved }

// delegate makes a v2 cgroup hand the memory and pids controllers to its
// children. A v2 cgroup with processes of its own cannot, so this process
// and its children (a shim started ahead) first move into a leaf, as
// systemd's delegation asks; when other processes are there too (a user's
// shell), they move back and the leaf goes.
func (r *Root) delegate() error {
	ctl := filepath.Join(r.dir, "cgroup.subtree_control")
	enable := func() error {
		if has(ctl, "memory") {
			return nil
		}
		return os.WriteFile(ctl, []byte("+memory"), 0)
	}
	err := enable()
	if err == nil {
		os.WriteFile(ctl, []byte("+pids"), 0) // a pids limit is counted where there is one
		return nil
	}
	if !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("cgroup %s: enable the memory controller: %w", r.dir, err)
	}
	leaf := filepath.Join(r.dir, "muster-agent-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return fmt.Errorf("cgroup %s: %w", leaf, err)
	}
	ours := ownProcesses(r.dir)
	move := func(to string) error {
		var err error
		for _, pid := range ours {
			err = errors.Join(err, os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0))
		}
		return err
	}
	if err := move(leaf); err == nil {
		if err = enable(); err == nil {
			r.moved = leaf
			os.WriteFile(ctl, []byte("+pids"), 0)
			return nil
		}
	}
	move(r.dir)
	os.Remove(leaf)
	return fmt.Errorf("cgroup %s: enable the memory controller: other processes are in it (give the agent a cgroup of its own, e.g. systemd's Delegate=yes)", r.dir)
}

// ownProcesses lists this process and its children among the processes of
// cgroup dir.
func ownProcesses(dir string) []int {
	self := os.Getpid()
	out := []int{self}
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(procs)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile("/proc/" + f + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); err == nil && i >= 0 {
			if fields := strings.Fields(string(stat[i+1:])); len(fields) > 1 && fields[1] == strconv.Itoa(self) {
				out = append(out, pid)
			}
		}
	}
	return out
}

func has(file, word string) bool {
	b, err := os.ReadFile(file)
	return err == nil && bytes.Contains(append(append([]byte(" "), bytes.TrimSpace(b)...), ' '), []byte(" "+word+" "))
}

// Locate finds the memory cgroup's directory from /proc/self/mountinfo and
// /proc/self/cgroup: v1's memory hierarchy where one is mounted (a hybrid
// system keeps its memory controller there), else the v2 hierarchy.
func Locate(mountinfo, cgroups []byte) (Version, string, error) {
	var v1Mount, v1Root, v2Mount, v2Root string
	for _, line := range strings.Split(string(mountinfo), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup2" && v2Mount == "":
			v2Mount, v2Root = f[4], f[3]
		case g[0] == "cgroup" && v1Mount == "" && hasOption(g[2], "memory"):
			v1Mount, v1Root = f[4], f[3]
		}
	}
	var v1Path, v2Path string
	found1, found2 := false, false
	for _, line := range strings.Split(string(cgroups), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2Path, found2 = parts[2], true
		case hasOption(parts[1], "memory"):
			v1Path, found1 = parts[2], true
		}
	}
	switch {
	case v1Mount != "" && found1:
		return V1, join(v1Mount, v1Root, v1Path), nil
	case v2Mount != "" && found2:
		return V2, join(v2Mount, v2Root, v2Path), nil
	}
	return 0, "", errors.New("no memory cgroup controller is mounted for this process")
}

func hasOption(list, want string) bool {
	for _, o := range strings.Split(list, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// join is where path, a cgroup as /proc/self/cgroup names it, lies under
// a mount of the hierarchy's root.
func join(mount, root, path string) string {
	if root != "/" {
		if rel, ok := strings.CutPrefix(path, root); ok && (rel == "" || rel[0] == '/') {
			path = rel
		}
	}
	return filepath.Join(mount, filepath.Clean("/"+path))
}

// Job is one job's cgroup: a directory with one child per worker.
type Job struct {
	root *Root
	dir  string
}

// NewJob makes a job's cgroup, name unique on this machine.
func (r *Root) NewJob(name string) (*Job, error) {
	dir := filepath.Join(r.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if r.version == V2 {
		ctl := filepath.Join(dir, "cgroup.subtree_control")
		if err := os.WriteFile(ctl, []byte("+memory"), 0); err != nil {
			os.Remove(dir)
			return nil, fmt.Errorf("cgroup %s: enable the memory controller: %w", dir, err)
		}
		os.WriteFile(ctl, []byte("+pids"), 0)
	}
	return &Job{root: r, dir: dir}, nil
}

// OpenJob is a job's cgroup made earlier, name as NewJob had it: one left
// by an agent that died, to remove.
func (r *Root) OpenJob(name string) (*Job, error) {
	dir := filepath.Join(r.dir, name)
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	return &Job{root: r, dir: dir}, nil
}

// Dir is the job's cgroup directory.
func (j *Job) Dir() string { return j.dir }

// Worker is one worker's cgroup.
type Worker struct {
	version Version
	dir     string
	limit   int64
}

// Worker makes a worker's cgroup, name unique in the job, with a memory
// limit of limit bytes when limit > 0. Swap counts against the limit where
// the kernel accounts it, so that the limit is what the worker gets.
func (j *Job) Worker(name string, limit int64) (*Worker, error) {
	w := &Worker{version: j.root.version, dir: filepath.Join(j.dir, name), limit: limit}
	if err := os.Mkdir(w.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if limit <= 0 {
		return w, nil
	}
	v := []byte(strconv.FormatInt(limit, 10))
	var err error
	if w.version == V2 {
		err = os.WriteFile(filepath.Join(w.dir, "memory.max"), v, 0)
		if err == nil {
			os.WriteFile(filepath.Join(w.dir, "memory.swap.max"), []byte("0"), 0)
		}
	} else {
		err = os.WriteFile(filepath.Join(w.dir, "memory.limit_in_bytes"), v, 0)
		if err == nil {
			// Absent without swap accounting; the limit holds without it.
			os.WriteFile(filepath.Join(w.dir, "memory.memsw.limit_in_bytes"), v, 0)
		}
	}
	if err != nil {
		os.Remove(w.dir)
		return nil, fmt.Errorf("cgroup %s: set the memory limit: %w", w.dir, err)
	}
	return w, nil
}

// Dir is the worker's cgroup directory, for its shim.
func (w *Worker) Dir() string { return w.dir }

// Limit is the worker's memory limit, 0 for none.
func (w *Worker) Limit() int64 { return w.limit }

// OOMKills is how many of the cgroup's processes the OOM killer killed,
// whichever OOM it was (the cgroup's limit or the machine's).
func (w *Worker) OOMKills() (int64, error) {
	file, key := "memory.events", "oom_kill"
	if w.version == V1 {
		file = "memory.oom_control"
	}
	b, err := os.ReadFile(filepath.Join(w.dir, file))
	if err != nil {
		return 0, err
	}
	return Keyed(b)[key], nil
}

// PidsRefused is how many forks the cgroup's pids limit refused (v2 only,
// 0 elsewhere).
func (w *Worker) PidsRefused() int64 {
	b, err := os.ReadFile(filepath.Join(w.dir, "pids.events"))
	if err != nil {
		return 0
	}
	return Keyed(b)["max"]
}

// Keyed parses a cgroup file of "key value" lines; lines of another shape
// are skipped.
func Keyed(b []byte) map[string]int64 {
	// Split in place, without a scanner's buffer: it is read at each
	// worker's exit.
	out := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// Remove removes the job's cgroups, once every process of the job has
// ended; a cgroup the kernel still counts a dying process in is retried
// for a while (bounded).
func (j *Job) Remove() error {
	entries, _ := os.ReadDir(j.dir)
	var err error
	for _, e := range entries {
		if e.IsDir() {
			err = errors.Join(err, rmdir(filepath.Join(j.dir, e.Name())))
		}
	}
	return errors.Join(err, rmdir(j.dir))
}

func rmdir(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
