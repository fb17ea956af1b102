package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// torchrun's and mpirun's flags, as their users type them: those meaning
// what one of muster's means run the job as that flag does, those with
// nothing to do here run it and say so once, those meaning something else
// are refused with one line saying what to type instead.
func TestOtherLaunchersFlags(t *testing.T) {
	t.Parallel()
	both := "[0] rank 0 of 2\n[1] rank 1 of 2\n"
	tests := []struct {
		name   string
		flags  []string
		code   int
		stdout string // "" for the ranks' lines, in any order
		stderr string // the whole of it for a no-op, its start for a refusal
	}{
		{"torchrun's rank filter", []string{"--local-ranks-filter", "1"}, 0, "[1] rank 1 of 2\n", ""},
		{"its underscores", []string{"--local_ranks_filter=0"}, 0, "[0] rank 0 of 2\n", ""},
		{"torchrun's restarts", []string{"--max_restarts", "0"}, 0, "", ""},
		{"--standalone", []string{"--standalone"}, 0, "", "launcher: --standalone does nothing here: without --cluster the job already runs on this machine alone, with a rendezvous of its own\n"},
		{"said once", []string{"--standalone", "--standalone"}, 0, "", "launcher: --standalone does nothing here: without --cluster the job already runs on this machine alone, with a rendezvous of its own\n"},
		{"--tee", []string{"--tee", "3"}, 0, "", "launcher: --tee does nothing here: every rank's output is printed anyway, and --log-dir DIR also writes it to files\n"},
		{"--tee=", []string{"--tee=3"}, 0, "", "launcher: --tee does nothing here: every rank's output is printed anyway, and --log-dir DIR also writes it to files\n"},
		{"--rdzv-backend", []string{"--rdzv-backend", "c10d"}, 0, "", "launcher: --rdzv-backend does nothing here: muster's store is the rendezvous\n"},
		{"--rdzv_id", []string{"--rdzv_id", "7"}, 0, "", "launcher: --rdzv_id does nothing here: muster gives each job an ID of its own (launcher jobs lists them)\n"},
		{"--oversubscribe", []string{"--oversubscribe"}, 0, "", "launcher: --oversubscribe does nothing here: muster starts the workers asked for, however many cores there are\n"},
		{"--allow-run-as-root", []string{"--allow-run-as-root"}, 0, "", "launcher: --allow-run-as-root does nothing here: muster runs root's jobs without it\n"},
		{"--node-rank", []string{"--node-rank", "0"}, 2, "", "launcher: --node-rank: launcher run starts every node's workers itself; to start one node's share as torchrun does, run agent run"},
		{"--node_rank", []string{"--node_rank=1"}, 2, "", "launcher: --node_rank: launcher run starts every node's workers itself"},
		{"--master-addr", []string{"--master-addr", "10.0.0.1"}, 2, "", "launcher: --master-addr: not needed: muster picks MASTER_ADDR and MASTER_PORT"},
		{"--master_port", []string{"--master_port", "29500"}, 2, "", "launcher: --master_port: not needed: muster picks MASTER_ADDR and MASTER_PORT"},
		{"--rdzv-endpoint", []string{"--rdzv-endpoint", "head:29400"}, 2, "", "launcher: --rdzv-endpoint: give --cluster HOST:PORT to run on a cluster's store, or start each node with agent run --rdzv HOST:PORT"},
		{"--redirects", []string{"--redirects", "3"}, 2, "", "launcher: --redirects: muster prints every rank's output: --output-ranks LIST"},
		{"-N", []string{"-N", "2"}, 2, "", "launcher: -N: mpirun's -N is workers per node, --nproc here; srun's is nodes, -n (--nnodes) here"},
		{"--bind-to", []string{"--bind-to", "core"}, 2, "", "launcher: --bind-to: muster binds each worker to its own GPUs' CPUs: --cpu-bind numa, socket or cores"},
		{"--map-by", []string{"--map-by", "socket"}, 2, "", "launcher: --map-by: muster binds each worker to its own GPUs' CPUs"},
		{"refused among no-ops", []string{"--standalone", "--node-rank", "0"}, 2, "", "launcher: --node-rank: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"run", "--nproc", "2"}, tt.flags...), "sh", "-c", `echo "rank $RANK of $WORLD_SIZE"`)
			r := runLauncher(t, args...)
			bad := r.code != tt.code
			switch {
			case tt.code != 0:
				bad = bad || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, tt.stderr)
			case tt.stdout != "":
				bad = bad || r.stdout != tt.stdout || r.stderr != tt.stderr
			default:
				bad = bad || len(r.stdout) != len(both) || !strings.Contains(r.stdout, "[0] rank 0 of 2\n") ||
					!strings.Contains(r.stdout, "[1] rank 1 of 2\n") || r.stderr != tt.stderr
			}
			if bad {
				t.Fatalf("launcher %s: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// -m MODULE and a .py program run under the worker's python3, as torchrun
// runs them; --no-python runs the program as given, and a worker's own -m
// after its command's first word stays the worker's.
func TestPythonPrograms(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	show := "import os, sys\nprint(os.environ['RANK'], sys.argv[1:])\n"
	files := map[string]string{
		"train.py":         show,
		"pkg/__init__.py":  "",
		"pkg/__main__.py":  show,
		"shell.py":         "#!/bin/sh\necho as given $RANK \"$@\"\n",
		"python-wrapper":   "#!/bin/sh\necho wrapped \"$@\"\nexec python3 \"$@\"\n",
		"pkg/shown_too.py": show,
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wrapper := "PYTHON_EXEC=" + filepath.Join(dir, "python-wrapper")
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{".py", nil, []string{"--nproc", "2", "train.py", "--lr", "1", "-m", "x"},
			"[0] 0 ['--lr', '1', '-m', 'x']\n[1] 1 ['--lr', '1', '-m', 'x']\n"},
		{".py after --", nil, []string{"--", "pkg/shown_too.py", "a"}, "[0] 0 ['a']\n"},
		{"-m", nil, []string{"--nproc", "2", "-m", "pkg", "--lr", "1", "-m", "x"},
			"[0] 0 ['--lr', '1', '-m', 'x']\n[1] 1 ['--lr', '1', '-m', 'x']\n"},
		{"--module", nil, []string{"--module", "pkg"}, "[0] 0 []\n"},
		{"the worker's own -m", nil, []string{"python3", "-m", "pkg", "b"}, "[0] 0 ['b']\n"},
		{"--no-python", nil, []string{"--no-python", "./shell.py", "c"}, "[0] as given 0 c\n"},
		{"--no_python", nil, []string{"--no_python", "./shell.py"}, "[0] as given 0\n"},
		{"PYTHON_EXEC", []string{wrapper}, []string{"train.py", "d"}, "[0] wrapped -u train.py d\n[0] 0 ['d']\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "--workdir", dir}, tt.args...)
			cmd, out, errb := launcher(t, tt.env, args...)
			r := wait(t, cmd, out, errb)
			if r.code != 0 || !sameLines(r.stdout, tt.want) || r.stderr != "" {
				t.Fatalf("launcher %s: exit %d\nstdout %q\nstderr %q\nwant exit 0 and %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, tt.want)
			}
		})
	}

	r := runLauncher(t, "run", "--workdir", dir, "-m", "--no-python", "pkg")
	if r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, "launcher: -m runs a module under Python and --no-python runs the command as given: give one of them") {
		t.Fatalf("-m with --no-python: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// sameLines says whether a and b hold the same lines, whatever their order:
// ranks print at once.
func sameLines(a, b string) bool {
	la, lb := strings.SplitAfter(a, "\n"), strings.SplitAfter(b, "\n")
	if len(la) != len(lb) {
		return false
	}
	count := map[string]int{}
	for i := range la {
		count[la[i]]++
		count[lb[i]]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}
