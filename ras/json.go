package ras

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The JSON report, as NCCL 2.28.7 and later write it (rasDumpCommsToJSON).
type jsonReport struct {
	NCCLVersion   string     `json:"nccl_version"`
	Communicators []jsonComm `json:"communicators"`
	RAS           struct {
		TimeoutsCount int `json:"timeouts_count"`
	} `json:"ras"`
}

type jsonComm struct {
	Hash         string        `json:"hash"` // "0x%lx"
	Size         int           `json:"size"`
	Ranks        []jsonRank    `json:"ranks"`
	MissingRanks []jsonMissing `json:"missing_ranks"`
}

type jsonRank struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"` // "unknown" when NCCL has no peer for it
	PID     int    `json:"pid"`  // -1 likewise
	CudaDev int    `json:"cuda_dev"`
	NvmlDev int    `json:"nvml_dev"`
	Status  struct {
		InitState      int  `json:"init_state"`  // an ncclResult_t
		AsyncError     int  `json:"async_error"` // likewise
		FinalizeCalled bool `json:"finalize_called"`
		DestroyFlag    bool `json:"destroy_flag"`
		AbortFlag      bool `json:"abort_flag"`
	} `json:"status"`
	CollectiveCounts opCounts `json:"collective_counts"`
}

type jsonMissing struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	CudaDev int    `json:"cuda_dev"`
	NvmlDev int    `json:"nvml_dev"`
	Status  struct {
		Unresponsive   bool `json:"unresponsive"`
		ConsideredDead bool `json:"considered_dead"`
	} `json:"status"`
}

// opCounts keeps collective_counts in the order NCCL writes them, which is
// the order its text report lists mismatches in.
type opCounts []opCount

type opCount struct {
	op string
	n  int64
}

func (c *opCounts) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("collective_counts is not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		op, _ := t.(string)
		var v json.Number
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("collective_counts %q: %w", op, err)
		}
		n, ok := number(v.String(), 1<<62)
		if !ok || !plainWord(op, 32) {
			return fmt.Errorf("collective_counts %q: %q", op, v)
		}
		if len(*c) >= maxOpsPerComm {
			return errors.New("collective_counts has too many operations")
		}
		*c = append(*c, opCount{op, n})
	}
	return nil
}

// NCCL 2.28.7 to 2.28.9 leave out the comma after a missing rank's nvml_dev
// (fixed in 2.29.2), which makes any report with a missing rank invalid JSON.
var missingComma = regexp.MustCompile(`("nvml_dev":[ \t]*-?[0-9]+)([ \t\r]*\n[ \t]*"status")`)

// ParseJSON reads NCCL's JSON report (NCCL 2.28.7 and later, after
// "SET FORMAT json"). It lists every rank of every communicator, so the
// behind and missing ranks are derived here the way NCCL's text report
// derives them.
func ParseJSON(b []byte) (*Report, error) {
	if len(b) > MaxReportSize {
		return nil, fmt.Errorf("report of %d bytes is over the %d-byte limit", len(b), MaxReportSize)
	}
	var jr jsonReport
	if err := json.Unmarshal(b, &jr); err != nil {
		fixed := missingComma.ReplaceAll(b, []byte("$1,$2"))
		jr = jsonReport{}
		if bytes.Equal(fixed, b) || json.Unmarshal(fixed, &jr) != nil {
			return nil, err
		}
	}
	if !plainWord(jr.NCCLVersion, 64) {
		return nil, errors.New("not an NCCL RAS JSON report: no nccl_version")
	}
	r := &Report{Format: "json", NCCLVersion: jr.NCCLVersion, Timeouts: max(jr.RAS.TimeoutsCount, 0), Complete: true}
	b2 := jsonBuilder{r: r, procs: make(map[procKey]int)}
	for i := range jr.Communicators {
		if len(r.Comms) >= maxComms {
			r.Truncated = true
			break
		}
		c, err := b2.comm(&jr.Communicators[i])
		if err != nil {
			return nil, fmt.Errorf("communicator %d: %w", i, err)
		}
		r.Comms = append(r.Comms, c)
	}
	r.MissingProcessCount = len(r.MissingProcesses)
	r.DeadProcessCount = len(r.DeadProcesses)
	return r, nil
}

type jsonBuilder struct {
	r       *Report
	members int
	procs   map[procKey]int // a missing process's index in MissingProcesses or DeadProcesses
}

type procKey struct {
	dead bool
	pid  int
	node string
}

func (b *jsonBuilder) addMember() bool {
	if b.members >= maxMembers {
		b.r.Truncated = true
		return false
	}
	b.members++
	return true
}

func (b *jsonBuilder) comm(jc *jsonComm) (Comm, error) {
	id, ok := strings.CutPrefix(jc.Hash, "0x")
	if !ok || !hexID(id) {
		return Comm{}, fmt.Errorf("hash %q", jc.Hash)
	}
	if jc.Size < 0 || jc.Size > maxInt32 {
		return Comm{}, fmt.Errorf("size %d", jc.Size)
	}
	// The text report prints the hash as %016lx.
	c := Comm{ID: strings.Repeat("0", 16-len(id)) + strings.ToLower(id), Size: jc.Size}

	ranks := make([]Member, len(jc.Ranks))
	states := make([]string, len(jc.Ranks))
	for i := range jc.Ranks {
		jr := &jc.Ranks[i]
		m, err := jsonMember(jr.Rank, jr.Host, jr.PID, jr.CudaDev, jr.NvmlDev)
		if err != nil {
			return c, err
		}
		ranks[i] = m
		states[i] = rankState(jr)
	}

	var failed bool
	for i := range jc.Ranks {
		jr := &jc.Ranks[i]
		for _, code := range []int{jr.Status.InitState, jr.Status.AsyncError} {
			if what := resultString(code); what != "" {
				failed = true
				if b.addMember() {
					m := ranks[i]
					m.Error = what
					c.Errors = append(c.Errors, m)
				}
			}
		}
	}

	// A missing rank whose process answered has no such communicator
	// (NOCOMM); one whose process did not is missing.
	var nocomm []Member
	for i := range jc.MissingRanks {
		jm := &jc.MissingRanks[i]
		m, err := jsonMember(jm.Rank, jm.Host, jm.PID, jm.CudaDev, jm.NvmlDev)
		if err != nil {
			return c, err
		}
		if !jm.Status.Unresponsive && !jm.Status.ConsideredDead {
			m.Status = "NOCOMM"
			nocomm = append(nocomm, m)
			continue
		}
		if b.addMember() {
			c.Missing = append(c.Missing, m)
			b.process(m, jm.Status.ConsideredDead)
		}
	}
	c.MissingCount = len(c.Missing)

	c.State, c.StatusOutliers = b.statusOutliers(ranks, states, nocomm)
	statusMismatch := len(c.StatusOutliers) > 0

	for _, op := range opOrder(jc.Ranks) {
		counts := make(map[int64]int)
		var named []Member
		for i := range jc.Ranks {
			m := ranks[i]
			m.Launched = jc.Ranks[i].CollectiveCounts.get(op)
			counts[m.Launched]++
			named = append(named, m)
		}
		if len(counts) < 2 {
			continue
		}
		if len(c.Ops) >= maxOpsPerComm {
			b.r.Truncated = true
			break
		}
		var lcs []launchCount
		for v, n := range counts {
			lcs = append(lcs, launchCount{v, n})
		}
		mo := OpMismatch{Op: op}
		finishOp(&mo, lcs, named)
		kept := mo.Behind[:0]
		for _, m := range mo.Behind {
			if b.addMember() {
				kept = append(kept, m)
			}
		}
		mo.Behind = kept
		c.Ops = append(c.Ops, mo)
	}
	if len(c.Ops) > 0 {
		c.Op, c.Launched, c.Behind = c.Ops[0].Op, c.Ops[0].Launched, c.Ops[0].Behind
	}
	c.Status = joinStatus(len(c.Missing) > 0, failed, statusMismatch || len(c.Ops) > 0)
	return c, nil
}

// statusOutliers finds the communicator's furthest state and, when its ranks
// differ, the ranks outside the most common state (ties going to the
// further state, as NCCL sorts them).
func (b *jsonBuilder) statusOutliers(ranks []Member, states []string, nocomm []Member) (string, []Member) {
	count := make(map[string]int)
	furthest := ""
	for _, s := range states {
		count[s]++
		if stateRank(s) > stateRank(furthest) {
			furthest = s
		}
	}
	if len(nocomm) > 0 {
		count["NOCOMM"] += len(nocomm)
		if furthest == "" {
			furthest = "NOCOMM"
		}
	}
	if len(count) < 2 {
		return furthest, nil
	}
	common := ""
	for s, n := range count {
		if common == "" || n > count[common] || n == count[common] && stateRank(s) > stateRank(common) {
			common = s
		}
	}
	var out []Member
	for i, m := range ranks {
		if states[i] != common && b.addMember() {
			m.Status = states[i]
			out = append(out, m)
		}
	}
	if common != "NOCOMM" {
		for _, m := range nocomm {
			if b.addMember() {
				out = append(out, m)
			}
		}
	}
	return furthest, out
}

// process files a missing rank's process under MissingProcesses or
// DeadProcesses, once per process, gathering its GPUs.
func (b *jsonBuilder) process(m Member, dead bool) {
	list := &b.r.MissingProcesses
	if dead {
		list = &b.r.DeadProcesses
	}
	k := procKey{dead, m.PID, m.Node}
	i, ok := b.procs[k]
	if !ok {
		i = len(*list)
		b.procs[k] = i
		*list = append(*list, Process{PID: m.PID, Node: m.Node})
	}
	p := &(*list)[i]
	if m.GPU >= 0 && !slices.Contains(p.GPUs, m.GPU) && len(p.GPUs) < maxGPUs {
		p.GPUs = append(p.GPUs, m.GPU)
		p.NVMLGPUs = append(p.NVMLGPUs, m.NVMLGPU)
	}
}

func jsonMember(rank int, host string, pid, cuda, nvml int) (Member, error) {
	if rank < 0 || rank > maxInt32 {
		return Member{}, fmt.Errorf("rank %d", rank)
	}
	if cuda < 0 || cuda >= maxGPUIndex || nvml < 0 || nvml >= maxGPUIndex {
		return Member{}, fmt.Errorf("rank %d: GPU %d (NVML %d)", rank, cuda, nvml)
	}
	if pid < -1 || pid > maxInt32 {
		return Member{}, fmt.Errorf("rank %d: pid %d", rank, pid)
	}
	if host == "unknown" {
		host = ""
	}
	if !address(host) {
		return Member{}, fmt.Errorf("rank %d: host %q", rank, host)
	}
	return Member{CommRank: rank, GPU: cuda, NVMLGPU: nvml, PID: max(pid, 0), Node: host}, nil
}

// rankState is NCCL's reading of a rank's status flags.
func rankState(r *jsonRank) string {
	switch {
	case r.Status.AbortFlag:
		return "ABORT"
	case r.Status.FinalizeCalled || r.Status.DestroyFlag:
		return "FINALIZE"
	case r.Status.InitState == 0:
		return "RUNNING"
	default:
		return "INIT"
	}
}

// resultString names an ncclResult_t that is an error, as NCCL's text report
// does; "" for ncclSuccess and ncclInProgress.
func resultString(code int) string {
	switch code {
	case 0, 7:
		return ""
	case 1:
		return "Unhandled CUDA error"
	case 2:
		return "System error"
	case 3:
		return "Internal error"
	case 4:
		return "Invalid argument"
	case 5:
		return "Invalid usage"
	case 6:
		return "Remote process error"
	default:
		return "Unexpected error (" + strconv.Itoa(code) + ")"
	}
}

// opOrder lists the ops named in any rank's counts, first seen first.
func opOrder(ranks []jsonRank) []string {
	var ops []string
	for i := range ranks {
		for _, c := range ranks[i].CollectiveCounts {
			if !slices.Contains(ops, c.op) && len(ops) < maxOpsPerComm {
				ops = append(ops, c.op)
			}
		}
	}
	return ops
}

// get returns the count of op, 0 when the rank has none.
func (c opCounts) get(op string) int64 {
	for _, v := range c {
		if v.op == op {
			return v.n
		}
	}
	return 0
}
