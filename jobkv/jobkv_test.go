package jobkv_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/agent/agenttest"
	"github.com/musterhq/muster/jobkv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

const storeWorkerVar = "MUSTER_ENGINE_TEST_STORE_WORKER"

// TestStoreWorker is the worker of TestWorkersUseTheirJobsStore, run by an
// agent; on its own it does nothing.
func TestStoreWorker(t *testing.T) {
	if os.Getenv(storeWorkerVar) == "" {
		t.Skip("runs as a worker of TestWorkersUseTheirJobsStore")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rank, world := os.Getenv("RANK"), os.Getenv("WORLD_SIZE")
	n, _ := strconv.Atoi(world)
	st, err := jobkv.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Set(ctx, "addr-"+rank, []byte("host-"+rank)); err != nil {
		t.Fatal(err)
	}
	if err := st.Barrier(ctx, "all-set", rank, n); err != nil {
		t.Fatal(err)
	}
	var got []string
	for r := 0; r < n; r++ {
		v, err := st.Get(ctx, fmt.Sprint("addr-", r))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(v))
	}
	if rank == "0" {
		if v, err := st.Wait(ctx, "from-1"); err != nil || string(v) != "hello" {
			t.Fatalf("wait: %q %v", v, err)
		}
	} else if rank == "1" {
		st.Set(ctx, "from-1", []byte("hello"))
	}
	fmt.Printf("STORE-WORKER %s saw %s\n", rank, strings.Join(got, ","))
}

func TestWorkersUseTheirJobsStore(t *testing.T) {
	if os.Getenv(storeWorkerVar) != "" {
		t.Skip("this is a worker")
	}
	// A cluster with a token: workers reach the store with their job's credential.
	tc := agenttest.NewCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub, err := tc.Client.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: args(os.Args[0], "-test.run=^TestStoreWorker$"), Nnodes: 1, Nproc: 3, KillTimeoutMs: 1000,
		Env: args(storeWorkerVar + "=1")}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := tc.Client.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: sub.JobId})
	if err != nil {
		t.Fatal(err)
	}
	var saw, all []string
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("job stream: %v", err)
		}
		if o := ev.GetOutput(); o != nil {
			for _, line := range strings.Split(strings.TrimSuffix(string(o.Data), "\n"), "\n") {
				all = append(all, line)
				if strings.HasPrefix(line, "STORE-WORKER") {
					saw = append(saw, line)
				}
			}
		}
		if f := ev.GetFinished(); f != nil {
			if f.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("job %v: %s\n%s", f.State, f.Summary, strings.Join(all, "\n"))
			}
			break
		}
	}
	slices.Sort(saw)
	want := []string{"STORE-WORKER 0 saw host-0,host-1,host-2", "STORE-WORKER 1 saw host-0,host-1,host-2", "STORE-WORKER 2 saw host-0,host-1,host-2"}
	if !slices.Equal(saw, want) {
		t.Fatalf("workers saw %q, want %q", saw, want)
	}
}

func TestDialStoreNeedsItsVariables(t *testing.T) {
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}
	if _, err := jobkv.DialFromLookup(lookup(map[string]string{"MUSTER_STORE_ADDR": "127.0.0.1:1"})); err == nil ||
		!strings.Contains(err.Error(), "MUSTER_JOB_TOKEN") {
		t.Fatalf("no job credential: %v", err)
	}
}

func args(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}
