package rendezvous

import (
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestValidateSpecDefaults(t *testing.T) {
	tests := []struct {
		gpus, nproc, wantNProc int32
	}{
		{0, 0, 1},
		{4, 0, 4},
		{4, 2, 2},
		{0, 3, 3},
	}
	for _, tt := range tests {
		spec := &musterv1.JobSpec{Argv: []string{"x"}, Nnodes: 1, Gpus: tt.gpus, Nproc: tt.nproc}
		if err := ValidateSpec(spec); err != nil || spec.Nproc != tt.wantNProc {
			t.Errorf("gpus %d nproc %d: nproc %d, %v; want %d", tt.gpus, tt.nproc, spec.Nproc, err, tt.wantNProc)
		}
	}
}

func TestValidateNode(t *testing.T) {
	tests := []struct {
		node *musterv1.Node
		want string
	}{
		{&musterv1.Node{Name: "gpu-01.example", Addr: "10.0.0.1", Rank: -1}, ""},
		{&musterv1.Node{Name: "", Addr: "10.0.0.1"}, "not a host name"},
		{&musterv1.Node{Name: "a b", Addr: "10.0.0.1"}, "not a host name"},
		{&musterv1.Node{Name: "n", Addr: "n.example"}, "not an IP address"},
		{&musterv1.Node{Name: "n", Addr: "::1", Rank: -2}, "node rank"},
		{&musterv1.Node{Name: "n", Addr: "::1", Gpus: []*musterv1.GPU{{Index: 0}, {Index: 0}}}, "repeated"},
	}
	for _, tt := range tests {
		err := validateNode(tt.node)
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validateNode(%v) = %v, want %q", tt.node, err, tt.want)
		}
	}
}

// FuzzValidateSpec feeds arbitrary specs and checks that an accepted one is
// within every bound the store relies on.
func FuzzValidateSpec(f *testing.F) {
	f.Add("python train.py", int32(1), int32(2), int32(0), "A=1", int64(10))
	f.Add("", int32(0), int32(-1), int32(3), "1=x", int64(-1))
	f.Add("x", int32(2), int32(3), int32(2), "A", int64(0))
	f.Fuzz(func(t *testing.T, argv string, nnodes, gpus, nproc int32, env string, timeoutMs int64) {
		spec := &musterv1.JobSpec{Argv: strings.Fields(argv), Nnodes: nnodes, Gpus: gpus, Nproc: nproc,
			Env: strings.Split(env, ";"), TimeoutMs: timeoutMs, KillTimeoutMs: timeoutMs}
		if ValidateSpec(spec) != nil {
			return
		}
		if len(spec.Argv) == 0 || spec.Nnodes < 1 || spec.Nproc < 1 || spec.Gpus < 0 ||
			(spec.Gpus > 0 && spec.Gpus%spec.Nproc != 0) || spec.TimeoutMs < 0 {
			t.Fatalf("accepted %v", spec)
		}
		for _, kv := range spec.Env {
			if name, _, ok := strings.Cut(kv, "="); !ok || !envName.MatchString(name) {
				t.Fatalf("accepted env %q", kv)
			}
		}
	})
}
