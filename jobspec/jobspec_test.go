package jobspec

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestDefaults(t *testing.T) {
	tests := []struct {
		gpus, nproc, wantNProc int32
	}{
		{0, 0, 1},
		{4, 0, 4},
		{4, 2, 2},
		{0, 3, 3},
	}
	for _, tt := range tests {
		spec := &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Gpus: tt.gpus, Nproc: tt.nproc}
		if err := Validate(spec); err != nil || spec.Nproc != tt.nproc {
			t.Errorf("gpus %d nproc %d: Validate changed nproc to %d, or failed: %v", tt.gpus, tt.nproc, spec.Nproc, err)
		}
		if Defaults(spec); spec.Nproc != tt.wantNProc {
			t.Errorf("gpus %d nproc %d: nproc %d, want %d", tt.gpus, tt.nproc, spec.Nproc, tt.wantNProc)
		}
	}
}

// byteStrings is ss as a JobSpec's byte fields hold them.
func byteStrings(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestValidateBytesAndStdin(t *testing.T) {
	rank := func(r int32) *int32 { return &r }
	tests := []struct {
		name string
		spec *musterv1.JobSpec
		want string // "" for accepted
	}{
		{"non-UTF-8 argument", &musterv1.JobSpec{Argv: byteStrings("echo", "caf\xe9")}, ""},
		{"non-UTF-8 value", &musterv1.JobSpec{Argv: byteStrings("x"), Env: byteStrings("A=caf\xe9 ")}, ""},
		{"non-UTF-8 directories", &musterv1.JobSpec{Argv: byteStrings("x"), Workdir: []byte("/tmp/\xff"), LogDir: []byte("/tmp/\xfe")}, ""},
		{"comma in a value", &musterv1.JobSpec{Argv: byteStrings("x"), Env: byteStrings("CUDA_VISIBLE_DEVICES=0,1")}, ""},
		{"NUL in an argument", &musterv1.JobSpec{Argv: byteStrings("x", "a\x00b")}, "argument 1 of the command holds a NUL byte"},
		{"NUL in a value", &musterv1.JobSpec{Argv: byteStrings("x"), Env: byteStrings("A=a\x00")}, "--env A: the value holds a NUL byte"},
		{"NUL in the workdir", &musterv1.JobSpec{Argv: byteStrings("x"), Workdir: []byte("/a\x00")}, "working directory"},
		{"non-UTF-8 name", &musterv1.JobSpec{Argv: byteStrings("x"), Env: byteStrings("\xffA=1")}, `--env "\xffA=1": want NAME=value`},
		{"stdin rank", &musterv1.JobSpec{Argv: byteStrings("x"), Nproc: 4, StdinRank: rank(3)}, ""},
		{"stdin rank past the job", &musterv1.JobSpec{Argv: byteStrings("x"), Nproc: 4, StdinRank: rank(4)}, "--stdin 4: the job's ranks are 0..3"},
		{"negative stdin rank", &musterv1.JobSpec{Argv: byteStrings("x"), StdinRank: rank(-1)}, "--stdin -1: the job's ranks are 0..0"},
		{"stdin rank and all", &musterv1.JobSpec{Argv: byteStrings("x"), StdinRank: rank(0), StdinAll: true}, "not both"},
		{"mpich", &musterv1.JobSpec{Argv: byteStrings("x"), Mpi: "mpich"}, ""},
		{"openmpi", &musterv1.JobSpec{Argv: byteStrings("x"), Mpi: "openmpi", Nproc: 4}, ""},
		{"openmpi's one worker per node takes stdin", &musterv1.JobSpec{Argv: byteStrings("x"), Mpi: "openmpi", Nproc: 4, StdinRank: rank(1)},
			"--stdin 1: the job's ranks are 0..0"},
		{"an MPI not served", &musterv1.JobSpec{Argv: byteStrings("x"), Mpi: "lam"}, `--mpi "lam": want mpich or openmpi`},
		{"cores binding", &musterv1.JobSpec{Argv: byteStrings("x"), CpuBind: "cores"}, ""},
		{"torchrun's name reaches no store", &musterv1.JobSpec{Argv: byteStrings("x"), CpuBind: "exclusive"}, `--cpu-bind "exclusive": want none, numa, socket or cores`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Nnodes = 1
			err := Validate(tt.spec)
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestWorkersPerNode(t *testing.T) {
	for _, tt := range []struct {
		mpi  string
		want int32
	}{{"", 4}, {MPICH, 4}, {OpenMPI, 1}} {
		if got := WorkersPerNode(&musterv1.JobSpec{Nproc: 4, Mpi: tt.mpi}); got != tt.want {
			t.Errorf("--mpi %q: %d workers per node, want %d", tt.mpi, got, tt.want)
		}
	}
}

func TestValidateHosts(t *testing.T) {
	many := make([]string, MaxNodes+1)
	for i := range many {
		many[i] = "n" + strconv.Itoa(i)
	}
	tests := []struct {
		name           string
		nnodes         int32
		hosts, exclude []string
		want           string // "" for accepted
	}{
		{"hosts and exclude", 2, []string{"b", "10.0.0.1", "c"}, []string{"a", "10.0.0.9"}, ""},
		{"as many nodes as hosts", 2, []string{"b", "a"}, nil, ""},
		{"more nodes than hosts", 3, []string{"b", "a"}, nil, "--nnodes 3 is more than the 2 hosts listed"},
		{"a host twice", 1, []string{"a", "b", "a"}, nil, `--host/--hostfile: host "a" is listed twice`},
		{"excluded twice", 1, nil, []string{"a", "a"}, ""},
		{"empty host", 1, []string{"a", ""}, nil, "--host/--hostfile: an empty host name"},
		{"empty exclude", 1, nil, []string{""}, "--exclude: an empty host name"},
		{"long host", 1, []string{strings.Repeat("a", 256)}, nil, "longer than 255 bytes"},
		{"longest host", 1, []string{strings.Repeat("a", 255)}, nil, ""},
		{"not UTF-8", 1, nil, []string{"caf\xe9"}, `--exclude: host name "caf\xe9" is not UTF-8`},
		{"too many hosts", 1, many, nil, "--host/--hostfile: 10001 hosts, more than 10000"},
		{"too many excluded", 1, nil, many, "--exclude: 10001 hosts, more than 10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: tt.nnodes, Hosts: tt.hosts, Exclude: tt.exclude})
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzValidate feeds arbitrary specs and checks that an accepted one is
// within every bound the store relies on.
func FuzzValidate(f *testing.F) {
	f.Add("python train.py", int32(1), int32(2), int32(0), "A=1", int64(10), "", "")
	f.Add("", int32(0), int32(-1), int32(3), "1=x", int64(-1), "a,b", "c")
	f.Add("x", int32(2), int32(3), int32(2), "A", int64(0), "a,a", ",")
	f.Add("x", int32(3), int32(0), int32(0), "A=1", int64(0), "a,10.0.0.1", "caf\xe9")
	f.Fuzz(func(t *testing.T, argv string, nnodes, gpus, nproc int32, env string, timeoutMs int64, hosts, exclude string) {
		spec := &musterv1.JobSpec{Argv: byteStrings(strings.Fields(argv)...), Nnodes: nnodes, Gpus: gpus, Nproc: nproc,
			Env: byteStrings(strings.Split(env, ";")...), TimeoutMs: timeoutMs, KillTimeoutMs: timeoutMs}
		if hosts != "" {
			spec.Hosts = strings.Split(hosts, ",")
		}
		if exclude != "" {
			spec.Exclude = strings.Split(exclude, ",")
		}
		if Validate(spec) != nil {
			return
		}
		Defaults(spec)
		if len(spec.Hosts) > 0 && int(spec.Nnodes) > len(spec.Hosts) {
			t.Fatalf("accepted %d nodes on %d hosts", spec.Nnodes, len(spec.Hosts))
		}
		for i, h := range append(slices.Clone(spec.Hosts), spec.Exclude...) {
			if h == "" || len(h) > 255 || !utf8.ValidString(h) || i < len(spec.Hosts) && slices.Index(spec.Hosts, h) != i {
				t.Fatalf("accepted host %q in %q, %q", h, spec.Hosts, spec.Exclude)
			}
		}
		if len(spec.Argv) == 0 || spec.Nnodes < 1 || spec.Nproc < 1 || spec.Gpus < 0 ||
			(spec.Gpus > 0 && spec.Gpus%spec.Nproc != 0) || spec.TimeoutMs < 0 {
			t.Fatalf("accepted %v", spec)
		}
		for _, kv := range spec.Env {
			if name, _, ok := strings.Cut(string(kv), "="); !ok || !envName.MatchString(name) {
				t.Fatalf("accepted env %q", kv)
			}
		}
	})
}

// An elastic spec's counts are checked.
func TestElasticSpecBounds(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec *musterv1.JobSpec
		want string
	}{
		{"least above most", &musterv1.JobSpec{Nnodes: 2, MinNodes: 3}, "least nodes"},
		{"negative restarts", &musterv1.JobSpec{Nnodes: 1, MaxRestarts: -1}, "--max-restarts"},
		{"negative last call", &musterv1.JobSpec{Nnodes: 2, MinNodes: 1, LastCallMs: -1}, "--last-call"},
		{"stdin rank beyond the least round", &musterv1.JobSpec{Nnodes: 4, MinNodes: 1, Nproc: 2, StdinRank: ptr(int32(3))}, "--stdin 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Argv = byteStrings("x")
			if err := Validate(tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The restart policy's and the health check's fields are bounded.
func TestValidateRestartPolicyAndHealthCheck(t *testing.T) {
	tests := []struct {
		name string
		spec *musterv1.JobSpec
		want string // "" for accepted
	}{
		{"no-restart codes", &musterv1.JobSpec{NoRestartExitCodes: []int32{93, 255, 1}}, ""},
		{"code 0", &musterv1.JobSpec{NoRestartExitCodes: []int32{0}}, "--no-restart-exit-codes: 0 is not an exit code in 1..255"},
		{"code 256", &musterv1.JobSpec{NoRestartExitCodes: []int32{256}}, "--no-restart-exit-codes: 256 is not an exit code"},
		{"too many codes", &musterv1.JobSpec{NoRestartExitCodes: make([]int32, 257)}, "257 codes, more than 256"},
		{"node-loss", &musterv1.JobSpec{RestartOn: musterv1.RestartOn_RESTART_ON_NODE_LOSS}, ""},
		{"unknown restart-on", &musterv1.JobSpec{RestartOn: 7}, "--restart-on: unknown value 7"},
		{"back-off", &musterv1.JobSpec{RestartBackoffMs: 1000, RestartBackoffMaxMs: 30_000}, ""},
		{"negative back-off", &musterv1.JobSpec{RestartBackoffMs: -1}, "--restart-backoff or --restart-backoff-max is negative"},
		{"health check", &musterv1.JobSpec{HealthCheck: []byte("nvidia-smi -q | grep -q 'Pending : No'"), HealthCheckTimeoutMs: 5000}, ""},
		{"long health check", &musterv1.JobSpec{HealthCheck: make([]byte, MaxHealthCheckBytes+1)}, "--health-check: 65537 bytes"},
		{"NUL in the health check", &musterv1.JobSpec{HealthCheck: []byte("true\x00")}, "--health-check holds a NUL byte"},
		{"negative health timeout", &musterv1.JobSpec{HealthCheckTimeoutMs: -1}, "--health-check-timeout is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Argv, tt.spec.Nnodes = byteStrings("x"), 1
			err := Validate(tt.spec)
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestParseRestartOn(t *testing.T) {
	for in, want := range map[string]musterv1.RestartOn{"any": musterv1.RestartOn_RESTART_ON_ANY, "node-loss": musterv1.RestartOn_RESTART_ON_NODE_LOSS} {
		if got, err := ParseRestartOn(in); err != nil || got != want {
			t.Errorf("ParseRestartOn(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseRestartOn("node_loss"); err == nil || err.Error() != `--restart-on "node_loss": want any or node-loss` {
		t.Errorf("ParseRestartOn(node_loss) = %v", err)
	}
}

func TestValidateHang(t *testing.T) {
	tests := []struct {
		name string
		edit func(*musterv1.JobSpec)
		err  string // "" for valid
	}{
		{"off", func(s *musterv1.JobSpec) {}, ""},
		{"a timeout", func(s *musterv1.JobSpec) { s.HangTimeoutMs = 10_000 }, ""},
		{"all three", func(s *musterv1.JobSpec) {
			s.HangTimeoutMs, s.HangFirstTimeoutMs, s.HangOnSilence = 10_000, 600_000, true
		}, ""},
		{"too short", func(s *musterv1.JobSpec) { s.HangTimeoutMs = 50 }, "--hang-timeout 50ms is outside"},
		{"too long", func(s *musterv1.JobSpec) { s.HangTimeoutMs = 31 * 24 * 3600 * 1000 }, "--hang-timeout 744h0m0s is outside"},
		{"negative", func(s *musterv1.JobSpec) { s.HangTimeoutMs = -1 }, "--hang-timeout -1ms is outside"},
		{"first alone", func(s *musterv1.JobSpec) { s.HangFirstTimeoutMs = 1000 }, "--hang-first-timeout needs --hang-timeout"},
		{"first too short", func(s *musterv1.JobSpec) { s.HangTimeoutMs, s.HangFirstTimeoutMs = 1000, 1 }, "--hang-first-timeout 1ms is outside"},
		{"silence alone", func(s *musterv1.JobSpec) { s.HangOnSilence = true }, "--hang-on-silence needs --hang-timeout"},
		{"open mpi", func(s *musterv1.JobSpec) { s.HangTimeoutMs, s.Mpi = 1000, OpenMPI }, "--hang-timeout and --mpi openmpi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1}
			tt.edit(spec)
			err := Validate(spec)
			if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Validate: %v, want %q", err, tt.err)
			}
		})
	}
}

func TestForwardableSignals(t *testing.T) {
	for _, name := range ForwardableNames() {
		sig, ok := ForwardableSignal("SIG" + name)
		if !ok || !MayForward(int32(sig)) {
			t.Errorf("%s: %v %v", name, sig, ok)
		}
	}
	for _, sig := range []int32{0, 9, 17, 18, 19, 20, 23, 64, -1} {
		if MayForward(sig) {
			t.Errorf("signal %d may be forwarded", sig)
		}
	}
}
