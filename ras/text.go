package ras

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseText reads NCCL's text report (the answer to STATUS or VERBOSE
// STATUS). It keeps what it recognizes and skips any other line, so that a
// later NCCL still parses; it fails only on input that is no report at all.
func ParseText(b []byte) (*Report, error) {
	if len(b) > MaxReportSize {
		return nil, fmt.Errorf("report of %d bytes is over the %d-byte limit", len(b), MaxReportSize)
	}
	p := textParser{r: &Report{Format: "text"}, comm: -1, commIndex: make(map[string]int)}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		p.line(strings.TrimSpace(string(line)))
	}
	if !p.recognized {
		return nil, errors.New("not an NCCL RAS text report")
	}
	p.finish()
	return p.r, nil
}

// The report's sections, in the order NCCL prints them.
type section int

const (
	secNone section = iota
	secSummary
	secComms
	secErrors
	secWarnings
)

// What the last unindented line of the Errors or Warnings section opened.
type block int

const (
	blkNone block = iota
	blkMissingProcs
	blkDeadProcs
	blkTimeout
	blkComm
)

type textParser struct {
	r          *Report
	recognized bool
	sec        section
	totalsCols int // the job totals row is due, with this many columns
	blk        block
	members    int // members and processes kept, against maxMembers

	// The communicator block under way: its index in r.Comms, its kind
	// (INCOMPLETE, ERROR, MISMATCH), and what its last lines announced.
	comm      int
	kind      string
	inStatus  bool   // after "Communicator ranks have different status"
	curStatus string // from "N ranks have status S"
	curError  string // from "N ranks reported X"
	curCount  int64  // from "N ranks have launched up to operation V"
	haveCount bool

	commIndex map[string]int // "label id" -> index in r.Comms
	flags     []commFlags    // per communicator
	tallies   [][]opTally    // per communicator, per op in Comm.Ops
}

type commFlags struct{ incomplete, failed, mismatch bool }

// opTally gathers one op's lines until finish derives the OpMismatch.
type opTally struct {
	counts []launchCount
	named  []Member
}

func (p *textParser) line(s string) {
	if s == "" {
		return
	}
	switch {
	case strings.HasPrefix(s, "NCCL version "):
		if v, _, ok := strings.Cut(strings.TrimPrefix(s, "NCCL version "), " compiled with CUDA "); ok && plainWord(v, 64) {
			p.r.NCCLVersion = v
			p.recognized = true
		}
		return
	case s == "Job summary":
		p.enter(secSummary)
		return
	case strings.HasPrefix(s, "Communicators..."):
		p.enter(secComms)
		return
	case s == "Errors":
		p.enter(secErrors)
		return
	case s == "Warnings":
		p.enter(secWarnings)
		p.r.Complete = true // NCCL prints Warnings in its last message
		return
	case strings.Trim(s, "=") == "":
		return
	}
	switch p.sec {
	case secSummary:
		p.summaryLine(s)
	case secComms:
		p.groupRow(s)
	case secErrors, secWarnings:
		p.detail(s)
	}
}

func (p *textParser) enter(sec section) {
	p.sec = sec
	p.blk = blkNone
	p.totalsCols = 0
	p.recognized = true
}

// summaryLine takes the job totals: the row under a header line starting
// "(total)", with five columns when NCCL prints one table (Nodes, Processes
// per node, GPUs per process, Processes, GPUs) and three otherwise.
func (p *textParser) summaryLine(s string) {
	if strings.HasPrefix(s, "(total)") {
		p.totalsCols = 3
		if strings.Contains(s, "per node") {
			p.totalsCols = 5
		}
		return
	}
	cols := p.totalsCols
	p.totalsCols = 0
	f := strings.Fields(s)
	if cols == 0 || len(f) != cols {
		return
	}
	n, ok := numbers(f)
	if !ok {
		return
	}
	if cols == 5 {
		p.r.Nodes, p.r.Processes, p.r.GPUs = n[0], n[3], n[4]
	} else {
		p.r.Nodes, p.r.Processes, p.r.GPUs = n[0], n[1], n[2]
	}
}

// groupRow takes one row of the communicator table:
// "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s".
func (p *textParser) groupRow(s string) {
	f := strings.Fields(s)
	if len(f) != 8 {
		return
	}
	n, ok := numbers([]string{f[0], f[1], f[2], f[4], f[5]})
	if !ok || !rankRange(f[3]) || !upperWord(f[6]) || !upperWord(f[7]) {
		return
	}
	if len(p.r.Groups) >= maxGroups {
		p.r.Truncated = true
		return
	}
	p.r.Groups = append(p.r.Groups, Group{
		Index: n[0], Comms: n[1], Nodes: n[2], RanksPerNode: f[3], Size: n[3], Ranks: n[4],
		State: f[6], Status: f[7],
	})
}

func (p *textParser) detail(s string) {
	switch {
	case s == "INCOMPLETE":
		p.blk = blkMissingProcs
		return
	case s == "DEAD":
		p.blk = blkDeadProcs
		return
	case s == "TIMEOUT":
		p.blk = blkTimeout
		return
	case strings.HasPrefix(s, "#"):
		p.commHeader(s)
		return
	}
	switch p.blk {
	case blkMissingProcs, blkDeadProcs:
		p.processLine(s)
	case blkTimeout:
		// "Encountered %d communication timeout%s while gathering communicator data"
		if rest, ok := strings.CutPrefix(s, "Encountered "); ok {
			if n, ok := leadingNumber(rest, " communication timeout"); ok {
				p.r.Timeouts = n
			}
		}
	case blkComm:
		switch p.kind {
		case "INCOMPLETE":
			p.incompleteLine(s)
		case "ERROR":
			p.errorLine(s)
		case "MISMATCH":
			p.mismatchLine(s)
		}
	}
}

// processLine takes the lines under the job-level INCOMPLETE and DEAD.
func (p *textParser) processLine(s string) {
	if rest, ok := strings.CutPrefix(s, "Missing communicator data from "); ok {
		if n, ok := leadingNumber(rest, " job process"); ok {
			p.r.MissingProcessCount = n
		}
		return
	}
	if n, ok := leadingNumber(s, " job process"); ok && strings.Contains(s, "considered dead") {
		p.r.DeadProcessCount = n
		return
	}
	proc, ok := parseProcess(s)
	if !ok || !p.addMember() {
		return
	}
	if p.blk == blkDeadProcs {
		p.r.DeadProcesses = append(p.r.DeadProcesses, proc)
	} else {
		p.r.MissingProcesses = append(p.r.MissingProcesses, proc)
	}
}

// commHeader opens a communicator block: "#%d-%d (%016lx) KIND". A
// communicator may have several: ERROR under Errors, MISMATCH under Warnings.
func (p *textParser) commHeader(s string) {
	p.blk = blkNone
	f := strings.Fields(s)
	if len(f) != 3 || !commLabel(f[0]) {
		return
	}
	id, ok := strings.CutPrefix(f[1], "(")
	id, ok2 := strings.CutSuffix(id, ")")
	if !ok || !ok2 || !hexID(id) {
		return
	}
	kind := f[2]
	if kind != "INCOMPLETE" && kind != "ERROR" && kind != "MISMATCH" {
		return
	}
	key := f[0] + " " + id
	idx, ok := p.commIndex[key]
	if !ok {
		if len(p.r.Comms) >= maxComms {
			p.r.Truncated = true
			return
		}
		idx = len(p.r.Comms)
		p.commIndex[key] = idx
		p.r.Comms = append(p.r.Comms, Comm{Label: f[0], ID: strings.ToLower(id)})
		p.flags = append(p.flags, commFlags{})
		p.tallies = append(p.tallies, nil)
	}
	switch kind {
	case "INCOMPLETE":
		p.flags[idx].incomplete = true
	case "ERROR":
		p.flags[idx].failed = true
	case "MISMATCH":
		p.flags[idx].mismatch = true
	}
	p.blk, p.comm, p.kind = blkComm, idx, kind
	p.inStatus, p.curStatus, p.curError, p.haveCount = false, "", "", false
}

func (p *textParser) incompleteLine(s string) {
	c := &p.r.Comms[p.comm]
	if rest, ok := strings.CutPrefix(s, "Missing communicator data from "); ok {
		if n, ok := leadingNumber(rest, " rank"); ok {
			c.MissingCount = n
		}
		return
	}
	// NCCL before 2.26 names only the ranks: "The missing rank%s: 1,3".
	if rest, ok := strings.CutPrefix(s, "The missing rank"); ok {
		if _, list, ok := strings.Cut(rest, ": "); ok {
			for _, r := range parseRankList(list) {
				if p.addMember() {
					c.Missing = append(c.Missing, unknownMember(r))
				}
			}
		}
		return
	}
	rl, ok := parseRankLine(s)
	if ok && rl.form == formPlain && p.addMember() {
		c.Missing = append(c.Missing, rl.member)
	}
}

func (p *textParser) errorLine(s string) {
	if strings.HasPrefix(s, "Initialization error") || strings.HasPrefix(s, "Asynchronous error") {
		p.curError = ""
		return
	}
	if n, ok := leadingNumber(s, " ranks reported "); ok && n > 0 {
		_, what, _ := strings.Cut(s, " ranks reported ")
		if plainText(what, 64) {
			p.curError = what
		}
		return
	}
	rl, ok := parseRankLine(s)
	if !ok {
		return
	}
	m := rl.member
	switch rl.form {
	case formReported:
		m.Error = rl.word
	case formPlain:
		m.Error = p.curError
	default:
		return
	}
	if p.addMember() {
		c := &p.r.Comms[p.comm]
		c.Errors = append(c.Errors, m)
	}
}

func (p *textParser) mismatchLine(s string) {
	c := &p.r.Comms[p.comm]
	if s == "Communicator ranks have different status" {
		p.inStatus, p.curStatus = true, ""
		return
	}
	if rest, ok := strings.CutPrefix(s, "Communicator ranks have different "); ok {
		// "%s operation counts" from 2.26; "collective operation counts" before.
		op, ok := strings.CutSuffix(rest, " operation counts")
		if !ok || !plainWord(op, 32) {
			return
		}
		p.inStatus, p.haveCount = false, false
		if len(c.Ops) >= maxOpsPerComm {
			p.r.Truncated = true
			return
		}
		c.Ops = append(c.Ops, OpMismatch{Op: op})
		p.tallies[p.comm] = append(p.tallies[p.comm], opTally{})
		return
	}
	if rest, ok := strings.CutPrefix(s, "The unknown ranks: "); ok {
		for _, r := range parseRankList(rest) {
			if p.addMember() {
				m := unknownMember(r)
				m.Status = "UNKNOWN"
				c.StatusOutliers = append(c.StatusOutliers, m)
			}
		}
		return
	}
	if n, ok := leadingNumber(s, " ranks have "); ok {
		_, rest, _ := strings.Cut(s, " ranks have ")
		if st, ok := strings.CutPrefix(rest, "status "); ok && upperWord(st) {
			p.curStatus = st
		} else if v, ok := strings.CutPrefix(rest, "launched up to operation "); ok {
			if count, ok := number(v, 1<<62); ok {
				p.tally(launchCount{count, n})
				p.curCount, p.haveCount = count, true
			}
		} else if rest == "not launched any operations" {
			p.tally(launchCount{0, n})
			p.curCount, p.haveCount = 0, true
		}
		return
	}
	if !strings.HasPrefix(s, "Rank ") {
		return
	}
	// NCCL before 2.26 prints a lone unknown rank as "Rank %s has status %s".
	if rl, ok := parseRankLine(s); ok {
		p.mismatchRank(rl)
	} else if ranks, st, ok := unknownStatusLine(s); ok {
		for _, r := range ranks {
			if p.addMember() {
				m := unknownMember(r)
				m.Status = st
				c.StatusOutliers = append(c.StatusOutliers, m)
			}
		}
	}
}

func (p *textParser) mismatchRank(rl rankLine) {
	c := &p.r.Comms[p.comm]
	m := rl.member
	t := p.lastTally()
	switch {
	case rl.form == formStatus:
		m.Status = rl.word
	case rl.form == formPlain && p.inStatus && p.curStatus != "":
		m.Status = p.curStatus
	case rl.form == formLaunched && t != nil:
		m.Launched = rl.launched
		p.tally(launchCount{rl.launched, 1})
	case rl.form == formPlain && p.haveCount && t != nil:
		m.Launched = p.curCount
	default:
		return
	}
	if !p.addMember() {
		return
	}
	if m.Status != "" {
		c.StatusOutliers = append(c.StatusOutliers, m)
	} else {
		t.named = append(t.named, m)
	}
}

// tally records a count line under the op being read, if any.
func (p *textParser) tally(lc launchCount) {
	if t := p.lastTally(); t != nil && len(t.counts) < maxMembers {
		t.counts = append(t.counts, lc)
	}
}

func (p *textParser) lastTally() *opTally {
	if p.inStatus {
		return nil
	}
	ts := p.tallies[p.comm]
	if len(ts) == 0 {
		return nil
	}
	return &ts[len(ts)-1]
}

// addMember counts one more member or process against maxMembers.
func (p *textParser) addMember() bool {
	if p.members >= maxMembers {
		p.r.Truncated = true
		return false
	}
	p.members++
	return true
}

// finish fills in what a communicator's lines leave to its table row and
// derives the ops' totals.
func (p *textParser) finish() {
	groups := make(map[int]Group, len(p.r.Groups))
	for _, g := range p.r.Groups {
		if _, dup := groups[g.Index]; !dup {
			groups[g.Index] = g
		}
	}
	for i := range p.r.Comms {
		c := &p.r.Comms[i]
		if g, ok := groups[labelGroup(c.Label)]; ok {
			c.Size, c.State = g.Size, g.State
		}
		f := p.flags[i]
		c.Status = joinStatus(f.incomplete, f.failed, f.mismatch)
		for j := range c.Ops {
			finishOp(&c.Ops[j], p.tallies[i][j].counts, p.tallies[i][j].named)
		}
		if len(c.Ops) > 0 {
			c.Op, c.Launched, c.Behind = c.Ops[0].Op, c.Ops[0].Launched, c.Ops[0].Behind
		}
		c.MissingCount = max(c.MissingCount, len(c.Missing))
	}
	p.r.MissingProcessCount = max(p.r.MissingProcessCount, len(p.r.MissingProcesses))
	p.r.DeadProcessCount = max(p.r.DeadProcessCount, len(p.r.DeadProcesses))
}

// The forms of a line about one rank: "Rank %d" and then
const (
	formPlain    = iota // " -- WHO"
	formStatus          // " has status %s -- WHO"
	formLaunched        // " has launched up to operation %ld -- WHO", or " has not launched any operations -- WHO"
	formReported        // " reported %s -- WHO"
)

type rankLine struct {
	form     int
	member   Member // CommRank and who it is
	word     string // the status or the error
	launched int64
}

// parseRankLine reads "Rank %d<form> -- WHO", where WHO is "GPU %s managed by
// process %d on node %s" or "[process information not found]".
func parseRankLine(s string) (rankLine, bool) {
	var rl rankLine
	rest, ok := strings.CutPrefix(s, "Rank ")
	if !ok {
		return rl, false
	}
	head, who, ok := strings.Cut(rest, " -- ")
	if !ok {
		return rl, false
	}
	num, tail, _ := strings.Cut(head, " ")
	rank, ok := number(num, maxInt32)
	if !ok {
		return rl, false
	}
	if rl.member, ok = parseWho(who); !ok {
		return rl, false
	}
	rl.member.CommRank = int(rank)
	switch {
	case tail == "":
		rl.form = formPlain
	case tail == "has not launched any operations":
		rl.form = formLaunched // with a count of 0
	case strings.HasPrefix(tail, "has status "):
		rl.form, rl.word = formStatus, strings.TrimPrefix(tail, "has status ")
		if !upperWord(rl.word) {
			return rl, false
		}
	case strings.HasPrefix(tail, "has launched up to operation "):
		rl.form = formLaunched
		if rl.launched, ok = number(strings.TrimPrefix(tail, "has launched up to operation "), 1<<62); !ok {
			return rl, false
		}
	case strings.HasPrefix(tail, "reported "):
		rl.form, rl.word = formReported, strings.TrimPrefix(tail, "reported ")
		if !plainText(rl.word, 64) {
			return rl, false
		}
	default:
		return rl, false
	}
	return rl, true
}

// parseWho reads "GPU %s managed by process %d on node %s", where the GPU is
// "2" or "2 (NVML 3)", or "[process information not found]".
func parseWho(s string) (Member, bool) {
	m := Member{GPU: -1, NVMLGPU: -1}
	if s == "[process information not found]" {
		return m, true
	}
	rest, ok := strings.CutPrefix(s, "GPU ")
	if !ok {
		return m, false
	}
	gpu, rest, ok := strings.Cut(rest, " managed by process ")
	if !ok {
		return m, false
	}
	cuda, nvml, ok := parseGPUs(gpu, 1)
	if !ok {
		return m, false
	}
	// The line was trimmed, so an empty address leaves "on node" at its end.
	pid, node, ok := strings.Cut(rest+" ", " on node ")
	if !ok {
		return m, false
	}
	n, ok := number(pid, maxInt32)
	node = strings.TrimSpace(node)
	if !ok || !address(node) {
		return m, false
	}
	m.GPU, m.NVMLGPU, m.PID, m.Node = cuda[0], nvml[0], int(n), node
	return m, true
}

// parseProcess reads "Process %d on node %s managing GPU%s %s", the GPUs
// being "0,1" or "0,1 (NVML 2,3)".
func parseProcess(s string) (Process, bool) {
	var proc Process
	rest, ok := strings.CutPrefix(s, "Process ")
	if !ok {
		return proc, false
	}
	pid, rest, ok := strings.Cut(rest, " on node")
	if !ok {
		return proc, false
	}
	node, gpus, ok := strings.Cut(rest, " managing GPU")
	if !ok {
		return proc, false
	}
	n, ok := number(pid, maxInt32)
	node = strings.TrimSpace(node)
	if !ok || !address(node) {
		return proc, false
	}
	gpus = strings.TrimPrefix(gpus, "s")
	gpus, ok = strings.CutPrefix(gpus, " ")
	if !ok {
		return proc, false
	}
	cuda, nvml, ok := parseGPUs(gpus, maxGPUs)
	if !ok {
		return proc, false
	}
	return Process{PID: int(n), Node: node, GPUs: cuda, NVMLGPUs: nvml}, true
}

// parseGPUs reads "0,1" or "0,1 (NVML 2,3)", at most limit of each.
func parseGPUs(s string, limit int) (cuda, nvml []int, ok bool) {
	c, n, hasNVML := strings.Cut(s, " (NVML ")
	if cuda, ok = indexList(c, limit); !ok {
		return nil, nil, false
	}
	if !hasNVML {
		return cuda, cuda, true
	}
	n, ok = strings.CutSuffix(n, ")")
	if !ok {
		return nil, nil, false
	}
	if nvml, ok = indexList(n, limit); !ok {
		return nil, nil, false
	}
	return cuda, nvml, true
}

func indexList(s string, limit int) ([]int, bool) {
	parts := strings.Split(s, ",")
	if len(parts) > limit {
		return nil, false
	}
	out := make([]int, 0, len(parts))
	for _, f := range parts {
		n, ok := number(f, maxGPUIndex)
		if !ok {
			return nil, false
		}
		out = append(out, int(n))
	}
	return out, true
}

// parseRankList reads NCCL's "1,3" lists of rank numbers; nil if malformed.
func parseRankList(s string) []int {
	parts := strings.Split(s, ",")
	if len(parts) > 1024 { // NCCL prints them into a 1 KiB buffer
		return nil
	}
	out := make([]int, 0, len(parts))
	for _, f := range parts {
		n, ok := number(f, maxInt32)
		if !ok {
			return nil
		}
		out = append(out, int(n))
	}
	return out
}

// unknownStatusLine reads "Rank %s has status %s" (no process): NCCL before
// 2.26 on ranks that sent no data about the communicator.
func unknownStatusLine(s string) ([]int, string, bool) {
	rest, _ := strings.CutPrefix(s, "Rank ")
	list, st, ok := strings.Cut(rest, " has status ")
	if !ok || !upperWord(st) {
		return nil, "", false
	}
	ranks := parseRankList(list)
	return ranks, st, ranks != nil
}

func unknownMember(rank int) Member {
	return Member{CommRank: rank, GPU: -1, NVMLGPU: -1}
}

// number reads a decimal count without sign, at most limit.
func number(s string, limit int64) (int64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > limit {
		return 0, false
	}
	return n, true
}

func numbers(f []string) ([]int, bool) {
	out := make([]int, len(f))
	for i, s := range f {
		n, ok := number(s, maxInt32)
		if !ok {
			return nil, false
		}
		out[i] = int(n)
	}
	return out, true
}

// leadingNumber reads the count that starts s when sep follows it.
func leadingNumber(s, sep string) (int, bool) {
	num, _, ok := strings.Cut(s, sep)
	if !ok {
		return 0, false
	}
	n, ok := number(num, maxInt32)
	return int(n), ok
}

// commLabel checks "#%d-%d".
func commLabel(s string) bool {
	rest, ok := strings.CutPrefix(s, "#")
	if !ok {
		return false
	}
	g, i, ok := strings.Cut(rest, "-")
	_, okG := number(g, maxInt32)
	_, okI := number(i, maxInt32)
	return ok && okG && okI
}

func labelGroup(label string) int {
	g, _, _ := strings.Cut(strings.TrimPrefix(label, "#"), "-")
	n, ok := number(g, maxInt32)
	if !ok {
		return -1
	}
	return int(n)
}

// hexID checks a communicator hash: at most 16 hex digits.
func hexID(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// rankRange checks the table's ranks per node: "4" or "3-4".
func rankRange(s string) bool {
	lo, hi, isRange := strings.Cut(s, "-")
	_, okLo := number(lo, maxInt32)
	if !isRange {
		return okLo
	}
	_, okHi := number(hi, maxInt32)
	return okLo && okHi
}

// upperWord checks a status word such as RUNNING or INCOMPLETE,MISMATCH.
func upperWord(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && r != ',' {
			return false
		}
	}
	return true
}

// plainWord checks a short token without spaces or control characters.
func plainWord(s string, limit int) bool {
	return plainText(s, limit) && !strings.Contains(s, " ")
}

// plainText checks a short printable ASCII text.
func plainText(s string, limit int) bool {
	if s == "" || len(s) > limit {
		return false
	}
	for _, r := range s {
		if r < ' ' || r > '~' {
			return false
		}
	}
	return true
}

// address checks a node address as inet_ntop prints it; NCCL prints ""
// for a peer without one.
func address(s string) bool {
	return s == "" || plainWord(s, 64)
}
