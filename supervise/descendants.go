package supervise

import (
	"bytes"
	"os"
	"strconv"
)

// process is one descendant: its pid and its process group.
type process struct{ pid, pgid int }

// descendants lists every process below pid, read from /proc: a subreaper
// adopts orphans, so everything a worker left is found here, whatever
// session or process group it moved to.
func descendants(pid int) []process {
	children := map[int][]process{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, pg, ok := parentOf(p); ok {
			children[pp] = append(children[pp], process{p, pg})
		}
	}
	var out []process
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// parentOf reads the parent pid and process group from /proc/PID/stat; the
// command name may hold spaces and parentheses, so fields are counted after
// its last ')'.
func parentOf(pid int) (ppid, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	pp, err1 := strconv.Atoi(string(f[1]))
	pg, err2 := strconv.Atoi(string(f[2]))
	return pp, pg, err1 == nil && err2 == nil
}
