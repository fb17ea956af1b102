package agent

import (
	"strings"
	"testing"

	"github.com/musterhq/muster/envprop"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestMinimalEnviron(t *testing.T) {
	env := minimalEnviron([]string{"PATH=/bin", "SECRET=x", "HOME=/root"})
	if strings.Join(env, " ") != "PATH=/bin HOME=/root" {
		t.Fatalf("minimal environ = %v", env)
	}
	if _, ok := envprop.Lookup(env, "SECRET"); ok {
		t.Fatal("leaked")
	}
}

// plan runs the planning steps of asg's start, as the job's start does.
func (a *Agent) plan(asg *musterv1.Assignment) ([]workerPlan, jobFiles, error) {
	js := &jobStart{a: a, asg: asg}
	if err := runSteps(js.planSteps(), nil); err != nil {
		return nil, jobFiles{}, err
	}
	return js.plans, js.files, nil
}
