package agent

import (
	"context"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/flightrec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ras"
	"github.com/musterhq/muster/supervise"
)

// rasWait bounds asking NCCL's RAS service: its own wait for the other
// processes' data (one second, the least it takes), five more it may wait
// when a process that forwards it waits too, and the exchange.
const (
	rasTimeout = time.Second
	rasWait    = 7 * time.Second
)

// report gathers this node's clues to a hang once and publishes them for the
// store's verdict, which comes back as a stop naming the ranks to abort.
func (h *hangWatch) report(g *supervise.Group) {
	h.gather.Do(func() {
		clues := h.clues(g)
		h.log.Info("hang clues", zap.String("job", h.sup.job), zap.Int("ranks", len(clues.GetRanks())),
			zap.Bool("ras-answered", clues.GetRas().GetAnswered()), zap.Int("ras-culprits", len(clues.GetRas().GetCulprits())),
			zap.String("ras-error", clues.GetRas().GetError()))
		h.sup.pub.publish(&musterv1.JobEvent{JobId: h.sup.job, Event: &musterv1.JobEvent_HangClues{HangClues: clues}})
	})
}

// clues are what this node can tell of a hang: NCCL's RAS first, then,
// unless RAS named ranks, PyTorch's flight recorders (a dump takes seconds),
// and every running worker's last heartbeat by its file's own time.
func (h *hangWatch) clues(g *supervise.Group) *musterv1.HangClues {
	// A stopped process (SIGSTOP, a debugger) is seen at once; RAS would
	// wait seconds for it before it says that it got no answer.
	stopped := stoppedGroups()
	anyStopped := slices.ContainsFunc(h.ranks, func(r *rankWatch) bool { return stopped[int(r.pid.Load())] })
	out := &musterv1.HangClues{RoundId: h.round, Ras: &musterv1.RasAnswer{}}
	if !anyStopped {
		out.Ras = h.askRAS()
	}
	before := h.traceStamps()
	if !anyStopped && len(out.Ras.GetCulprits()) == 0 && out.Ras.GetElsewhere() == 0 {
		h.waitDumps(g, h.dumpFlightRecorders(), before)
	}
	now := time.Since(h.epoch)
	for _, r := range h.ranks {
		if r.ended.Load() || r.index < 0 {
			continue
		}
		c := &musterv1.RankClues{Rank: int32(r.rank), LastBeatUnixNs: r.beatAt.Load(), NeverBeat: !r.beat.Load(),
			Stopped: stopped[int(r.pid.Load())]}
		if hang := r.look(now); hang != nil {
			c.Silent, c.SilentMs, c.TimeoutMs = true, hang.GetSilentMs(), hang.GetTimeoutMs()
		}
		if path := r.dumpedTo(before[r]); path != "" {
			c.FlightRecorder = validText(path)
			c.Recorder = recorderClues(h.log, path)
		}
		out.Ranks = append(out.Ranks, c)
	}
	return out
}

// maxRecorderGroups bounds the process groups a rank's clues carry.
const maxRecorderGroups = 64

// recorderClues are, per process group, the last collective of a flight
// recorder's dump.
func recorderClues(log *zap.Logger, path string) []*musterv1.Collective {
	d, err := flightrec.ReadFile(path)
	if err != nil {
		log.Info("flight recorder not read", zap.String("path", path), zap.Error(err))
		return nil
	}
	var out []*musterv1.Collective
	for pg, e := range d.Last() {
		out = append(out, &musterv1.Collective{ProcessGroup: validText(pg), ProcessGroupName: validText(e.PGName),
			Op: validText(e.Op), Seq: e.Seq, State: validText(e.State)})
	}
	slices.SortFunc(out, func(a, b *musterv1.Collective) int { return strings.Compare(a.ProcessGroup, b.ProcessGroup) })
	return out[:min(len(out), maxRecorderGroups)]
}

// askRAS asks the job's NCCL RAS service on this node who is behind, and
// names the ranks of its answer that run here.
func (h *hangWatch) askRAS() *musterv1.RasAnswer {
	a := &musterv1.RasAnswer{}
	if h.ras == "" {
		return a
	}
	a.Asked = true
	ctx, cancel := context.WithTimeout(context.Background(), rasWait)
	defer cancel()
	rep, err := ras.Query(ctx, h.ras, rasTimeout)
	if err != nil {
		a.Error = validText(err.Error())
		return a
	}
	a.Answered = true
	local := localAddrs()
	for _, c := range rep.Culprits() {
		rank, ok := h.rankOfProcess(c.PID)
		if !ok || !local(c.Node) {
			a.Elsewhere++
			continue
		}
		a.Culprits = append(a.Culprits, &musterv1.RasCulprit{Rank: int32(rank), Communicator: validText(c.Comm), Op: validText(c.Op),
			Launched: c.Launched, OthersLaunched: c.OthersLaunched, Missing: c.Missing,
			CommRank: int32(c.CommRank), Gpu: int32(c.GPU), Pid: int32(c.PID)})
	}
	return a
}

// rankOfProcess is the rank of this node's worker that process pid is, or
// is in the process group of (a worker started through a shell).
func (h *hangWatch) rankOfProcess(pid int) (int, bool) {
	if pid <= 0 {
		return 0, false
	}
	pgrp := processGroup(pid)
	for _, r := range h.ranks {
		if p := int(r.pid.Load()); p > 0 && (p == pid || p == pgrp) {
			return r.rank, true
		}
	}
	return 0, false
}

// processGroup is a process's group, from /proc/PID/stat; 0 when unknown.
func processGroup(pid int) int {
	_, pg := processStat(strconv.Itoa(pid))
	return pg
}

// processStat is a process's state and group, from /proc/PID/stat; 0 and
// 0 when unknown.
func processStat(pid string) (state byte, pgrp int) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0
	}
	// The command's name, in parentheses, may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0
	}
	pg, _ := strconv.Atoi(f[2])
	return f[0][0], pg
}

// stoppedGroups are the process groups with a stopped process in them: by
// a signal (T) or a tracer (t).
func stoppedGroups() map[int]bool {
	out := map[int]bool{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		if e.Name()[0] < '1' || e.Name()[0] > '9' {
			continue
		}
		if state, pg := processStat(e.Name()); (state == 'T' || state == 't') && pg > 0 {
			out[pg] = true
		}
	}
	return out
}

// localAddrs says whether an address NCCL printed is one of this host's.
func localAddrs() func(string) bool {
	var own []net.IP
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				own = append(own, n.IP)
			}
		}
	}
	return func(node string) bool {
		host := node
		if h, _, err := net.SplitHostPort(node); err == nil {
			host = h
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		if ip == nil {
			return false
		}
		if ip.IsLoopback() {
			return true
		}
		return slices.ContainsFunc(own, ip.Equal)
	}
}

// collect gathers and publishes this node's clues for the store, which
// looks into a hang another node found.
func (h *hangWatch) collect(g *supervise.Group) {
	go h.report(g)
}
