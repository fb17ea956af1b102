package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/musterhq/muster/envprop"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A 10,000-node job: node rank 0 writes the hostfile and the addresses file
// (too long for one variable); any other node writes neither, and no
// variable comes near the kernel's limit on one string.
func TestPlanLargeJob(t *testing.T) {
	const n = 10_000
	a := &Agent{cfg: Config{Name: "node", TempDir: t.TempDir(), Environ: []string{"PATH=/bin"}}, log: zap.NewNop()}
	addrs, names, slots := make([]string, n), make([]string, n), make([]int32, n)
	for i := range addrs {
		addrs[i], names[i], slots[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), fmt.Sprintf("node-%d", i), 1
	}
	asg := func(rank int32) *musterv1.Assignment {
		return &musterv1.Assignment{
			JobId: fmt.Sprintf("j-%d", rank), RoundId: fmt.Sprintf("j-%d-r0", rank),
			Spec:     &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: n, Nproc: 1},
			NodeRank: rank, Nnodes: n, Nproc: 1, WorldSize: n,
			MasterAddr: "10.0.0.0", MasterPort: 29500, NcclUniqueId: make([]byte, 128),
		}
	}
	root := asg(0)
	root.NodeAddrs, root.NodeNames, root.NodeSlots = addrs, names, slots
	plans, files, err := a.plan(root)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(files.dir)
	env := plans[0].spec.env
	file, ok := envprop.Lookup(env, envprop.NodeAddrsFileVar)
	if !ok {
		t.Fatalf("node rank 0 has no %s", envprop.NodeAddrsFileVar)
	}
	if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != strings.Join(addrs, " ") {
		t.Fatalf("%s: %v", file, err)
	}
	if hf, _ := envprop.Lookup(env, envprop.Hostfile); hf != filepath.Join(files.dir, "hostfile") {
		t.Fatalf("hostfile %q", hf)
	}
	if _, ok := envprop.Lookup(env, envprop.NodeAddrs); ok {
		t.Fatalf("%s set on a 10,000-node job", envprop.NodeAddrs)
	}

	plans, files, err = a.plan(asg(4321))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(files.dir)
	env = plans[0].spec.env
	for _, k := range []string{envprop.NodeAddrs, envprop.NodeAddrsFileVar, envprop.Hostfile} {
		if v, ok := envprop.Lookup(env, k); ok {
			t.Errorf("node rank 4321 has %s=%.40s", k, v)
		}
	}
	if entries, _ := os.ReadDir(files.dir); len(entries) > 1 {
		t.Errorf("node rank 4321 wrote %d files", len(entries))
	}
	for _, kv := range env {
		if len(kv) > envprop.MaxValueBytes+64 {
			t.Errorf("%.40s... is %d bytes", kv, len(kv))
		}
	}
	if v, _ := envprop.Lookup(env, "WORLD_SIZE"); v != "10000" {
		t.Errorf("WORLD_SIZE=%s", v)
	}
}

// plan runs the planning steps of asg's start, as the job's start does:
// from the assignment's check to the heartbeat files, but the health check,
// which reports to a store.
func (a *Agent) plan(asg *musterv1.Assignment) ([]workerPlan, jobFiles, error) {
	js := &jobStart{a: a, asg: asg}
	steps := js.steps()
	first := slices.IndexFunc(steps, func(st step) bool { return st.name == "assignment" })
	last := slices.IndexFunc(steps, func(st step) bool { return st.name == "heartbeat files" })
	plan := slices.DeleteFunc(steps[first:last+1], func(st step) bool { return st.name == "health" })
	if err := runSteps(plan, stepHooks{}); err != nil {
		return nil, jobFiles{}, err
	}
	return js.plans, js.files, nil
}
