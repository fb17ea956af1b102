package pmi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/musterhq/muster/kv"
)

func TestProcessMapping(t *testing.T) {
	for _, tc := range []struct {
		nodes, per int
		want       string
	}{
		{1, 4, "(vector,(0,1,4))"},
		{2, 2, "(vector,(0,2,2))"},
		{16, 8, "(vector,(0,16,8))"},
	} {
		if got := ProcessMapping(tc.nodes, tc.per); got != tc.want {
			t.Errorf("ProcessMapping(%d, %d) = %q, want %q", tc.nodes, tc.per, got, tc.want)
		}
	}
}

// allgather is one rank's MPICH-like life: init, put its value, barrier,
// get every rank's value, barrier, finalize. It returns what it read.
func allgather(c *client, rank, size int) ([]string, error) {
	if r := c.call("cmd=init pmi_version=1 pmi_subversion=1"); r != "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0" {
		return nil, fmt.Errorf("init: %q", r)
	}
	if r := c.call(fmt.Sprintf("cmd=put kvsname=muster-test key=-allgather-1-%d value=v%d\\ of\\ %d", rank, rank, size)); r != "cmd=put_result rc=0 msg=success" {
		return nil, fmt.Errorf("put: %q", r)
	}
	if r := c.call("cmd=barrier_in"); r != "cmd=barrier_out" {
		return nil, fmt.Errorf("barrier: %q", r)
	}
	var got []string
	for i := range size {
		r := c.call(fmt.Sprintf("cmd=get kvsname=muster-test key=-allgather-1-%d", i))
		v, ok := strings.CutPrefix(r, "cmd=get_result rc=0 msg=success value=")
		if !ok {
			return nil, fmt.Errorf("get %d: %q", i, r)
		}
		got = append(got, v)
	}
	if r := c.call("cmd=barrier_in"); r != "cmd=barrier_out" {
		return nil, fmt.Errorf("barrier: %q", r)
	}
	if r := c.call("cmd=finalize"); r != "cmd=finalize_ack" {
		return nil, fmt.Errorf("finalize: %q", r)
	}
	return got, c.conn.Close()
}

// runNodes serves nodes×perNode ranks, node n holding Jobs[n], all doing
// allgather, and checks every rank read every value exactly.
func runNodes(t *testing.T, jobs []*Job, perNode int) {
	t.Helper()
	ctx := testCtx(t)
	size := len(jobs) * perNode
	want := make([]string, size)
	for i := range want {
		want[i] = fmt.Sprintf(`v%d\ of\ %d`, i, size)
	}
	var wg sync.WaitGroup
	errs := make([]error, size)
	results := make([]Result, size)
	for n, j := range jobs {
		for l := range perNode {
			rank := n*perNode + l
			c, done := serve(t, ctx, j, rank)
			wg.Go(func() {
				got, err := allgather(c, rank, size)
				if err == nil && strings.Join(got, ",") != strings.Join(want, ",") {
					err = fmt.Errorf("read %q, want %q", got, want)
				}
				errs[rank] = err
				results[rank] = <-done
			})
		}
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
		if r := results[rank]; !r.Finalized || r.Err != nil || r.Rank != rank {
			t.Errorf("rank %d: result %+v", rank, r)
		}
	}
}

// TestManyLocalRanks: 64 and 256 ranks on one node allgather through PMI-1.
func TestManyLocalRanks(t *testing.T) {
	for _, n := range []int{64, 256} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			j := testJob(t, n)
			runNodes(t, []*Job{j}, n)
			if got := j.Backend.(*memBackend).counts(); got[0] != 1 || got[1] != 1 || len(got) != 2 {
				t.Errorf("upstream barriers %v, want one each of 0 and 1", got)
			}
		})
	}
}

// TestTwoNodes: two Jobs share one kv space; each node calls the upstream
// barrier once per PMI barrier, and ranks read the other node's puts.
func TestTwoNodes(t *testing.T) {
	space := kv.NewMemory().Space("job-2")
	const perNode = 8
	var jobs []*Job
	var backends []*memBackend
	for n := range 2 {
		b := newMemBackend(space, fmt.Sprintf("node%d", n), 2)
		backends = append(backends, b)
		jobs = append(jobs, &Job{KVSName: "muster-test", Size: 2 * perNode, Mapping: ProcessMapping(2, perNode),
			Local: perNode, Backend: b})
	}
	runNodes(t, jobs, perNode)
	for n, b := range backends {
		if got := b.counts(); got[0] != 1 || got[1] != 1 || len(got) != 2 {
			t.Errorf("node %d: upstream barriers %v, want one each of 0 and 1", n, got)
		}
	}
}

// failingBackend fails its barrier: every local rank's connection closes.
type failingBackend struct{ SpaceBackend }

func (failingBackend) Barrier(context.Context, int) error { return fmt.Errorf("store unreachable") }

func TestBarrierFailure(t *testing.T) {
	j := testJob(t, 2)
	j.Backend = failingBackend{SpaceBackend{Space: kv.NewMemory().Space("x"), Node: "n", Nodes: 1}}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for rank := range 2 {
		c, done := serve(t, ctx, j, rank)
		wg.Go(func() {
			c.send("cmd=barrier_in\n")
			if r := wait(t, done); r.Err == nil || !strings.Contains(r.Err.Error(), "barrier 0: store unreachable") {
				t.Errorf("rank %d: result %+v", rank, r)
			}
		})
	}
	wg.Wait()
}

// TestCancel: ending ctx ends a rank waiting at the barrier for a rank
// that never comes.
func TestCancel(t *testing.T) {
	j := testJob(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	c, done := serve(t, ctx, j, 0)
	c.send("cmd=barrier_in\n")
	cancel()
	if r := wait(t, done); r.Err == nil || !strings.Contains(r.Err.Error(), "context canceled") {
		t.Fatalf("result %+v", r)
	}
}

func TestBadJob(t *testing.T) {
	good := func() *Job { return testJob(t, 2) }
	for _, tc := range []struct {
		name string
		edit func(*Job)
	}{
		{"no kvs name", func(j *Job) { j.KVSName = "" }},
		{"space in kvs name", func(j *Job) { j.KVSName = "a b" }},
		{"no size", func(j *Job) { j.Size = 0 }},
		{"more local than size", func(j *Job) { j.Local = 3 }},
		{"no backend", func(j *Job) { j.Backend = nil }},
	} {
		j := good()
		tc.edit(j)
		c, done := serve(t, testCtx(t), j, 0)
		if r := wait(t, done); r.Err == nil {
			t.Errorf("%s: served", tc.name)
		}
		c.expectClosed()
	}
}
