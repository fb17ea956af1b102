package cmdline

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// testApp is a small launcher: run takes a count with mpirun's and
// torchrun's names, a duration, a repeatable -x and a command.
type testApp struct {
	app      *cli.App
	out, err bytes.Buffer
	nproc    *Count
	timeout  *Duration
	env      *List
	ran      bool
	argv     []string
	tag      bool
}

func newTestApp() *testApp {
	ta := &testApp{nproc: NewCount(0, 0, 4096), timeout: NewDuration(0), env: &List{}}
	ta.app = &cli.App{
		Name:      "launcher",
		Writer:    &ta.out,
		ErrWriter: &ta.err,
		Commands: []*cli.Command{{
			Name: "run",
			Flags: []cli.Flag{
				Flag(ta.nproc, "nproc", []string{"np", "nproc-per-node", "nproc_per_node"}, "workers"),
				Flag(ta.timeout, "timeout", nil, "limit"),
				Flag(ta.env, "env", []string{"x"}, "variables"),
				&cli.BoolFlag{Name: "tag-output", Value: true},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() == 0 {
					return Usagef(c, "no command given")
				}
				ta.ran, ta.argv, ta.tag = true, c.Args().Slice(), c.Bool("tag-output")
				return nil
			},
		}, {
			Name: "hostlist",
			Subcommands: []*cli.Command{{
				Name:   "expand",
				Action: func(c *cli.Context) error { return nil },
			}},
		}},
	}
	return ta
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"not a number", []string{"run", "--nproc", "abc", "--", "x"},
			"launcher: --nproc abc: not a whole number; see launcher run --help"},
		{"named as typed", []string{"run", "-np", "abc", "--", "x"},
			"launcher: -np abc: not a whole number; see launcher run --help"},
		{"with =", []string{"run", "--nproc_per_node=4x", "x"},
			"launcher: --nproc_per_node 4x: not a whole number; see launcher run --help"},
		{"overflow", []string{"run", "--nproc", "4294967298", "x"},
			"launcher: --nproc 4294967298: at most 4096; see launcher run --help"},
		{"unknown flag", []string{"run", "--frob", "x"},
			"launcher: unknown flag --frob; see launcher run --help"},
		{"unknown short flag", []string{"run", "-q", "x"},
			"launcher: unknown flag -q; see launcher run --help"},
		{"a typo", []string{"run", "--nprocs", "2", "x"},
			"launcher: unknown flag --nprocs (did you mean --nproc?); see launcher run --help"},
		{"two letters swapped", []string{"run", "-tiemout", "2", "x"},
			"launcher: unknown flag -tiemout (did you mean --timeout?); see launcher run --help"},
		{"another name's typo", []string{"run", "--nproc-per_node=2", "x"},
			"launcher: unknown flag --nproc-per_node (did you mean --nproc-per-node?); see launcher run --help"},
		{"bad duration", []string{"run", "--timeout", "5x", "x"},
			"launcher: --timeout 5x: not a duration: give one such as 30s, 5m or 1h30m, or a number of seconds; see launcher run --help"},
		{"below a millisecond", []string{"run", "--timeout", "500us", "x"},
			"launcher: --timeout 500us: below a millisecond, the smallest step muster counts in (give 1ms or more, or 0); see launcher run --help"},
		{"value with a space", []string{"run", "--nproc", "4 ", "x"},
			`launcher: --nproc "4 ": not a whole number; see launcher run --help`},
		{"missing value", []string{"run", "--nproc"},
			"launcher: --nproc needs a value; see launcher run --help"},
		{"bad boolean", []string{"run", "--tag-output=maybe", "x"},
			"launcher: --tag-output=maybe: want true or false; see launcher run --help"},
		{"missing command", []string{"run", "--nproc", "2"},
			"launcher: no command given; see launcher run --help"},
		{"unknown command", []string{"frob"},
			"launcher: unknown command frob; see launcher --help"},
		{"subcommand", []string{"hostlist", "expand", "--frob"},
			"launcher: unknown flag --frob; see launcher hostlist expand --help"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestApp()
			code := Run(ta.app, append([]string{"launcher"}, tt.args...))
			if code != UsageExitCode || ta.err.String() != tt.want+"\n" || ta.out.Len() != 0 || ta.ran {
				t.Fatalf("exit %d, ran %v\nstdout %q\nstderr %q\nwant exit 2, nothing on stdout and stderr %q",
					code, ta.ran, ta.out.String(), ta.err.String(), tt.want+"\n")
			}
		})
	}
}

func TestFlagSpellings(t *testing.T) {
	tests := []struct {
		args    []string
		nproc   int32
		env     []string
		timeout time.Duration
	}{
		{[]string{"--nproc", "4"}, 4, nil, 0},
		{[]string{"-np", "4"}, 4, nil, 0}, // mpirun
		{[]string{"--np", "4"}, 4, nil, 0},
		{[]string{"-np=4"}, 4, nil, 0},
		{[]string{"--nproc-per-node", "4"}, 4, nil, 0}, // torchrun
		{[]string{"--nproc_per_node=4"}, 4, nil, 0},
		{[]string{"--nproc", "2", "-np", "3"}, 3, nil, 0}, // names mix; the last wins
		{[]string{"--timeout", "30"}, 0, nil, 30 * time.Second},
		{[]string{"-x", "CUDA_VISIBLE_DEVICES=0,1", "--env", "NCCL_SOCKET_IFNAME=^docker0,lo", "-x", "A=b  "}, 0,
			[]string{"CUDA_VISIBLE_DEVICES=0,1", "NCCL_SOCKET_IFNAME=^docker0,lo", "A=b  "}, 0},
	}
	for _, tt := range tests {
		ta := newTestApp()
		args := append(append([]string{"launcher", "run"}, tt.args...), "--", "cmd", "--nproc", "9")
		if code := Run(ta.app, args); code != 0 {
			t.Errorf("%q: exit %d: %s", tt.args, code, ta.err.String())
			continue
		}
		if ta.nproc.Int32() != tt.nproc || ta.timeout.Value() != tt.timeout || strings.Join(ta.env.Values(), "|") != strings.Join(tt.env, "|") {
			t.Errorf("%q: nproc %d, timeout %s, env %q; want %d, %s, %q", tt.args, ta.nproc.Int32(), ta.timeout.Value(), ta.env.Values(), tt.nproc, tt.timeout, tt.env)
		}
		if strings.Join(ta.argv, " ") != "cmd --nproc 9" {
			t.Errorf("%q: command %q", tt.args, ta.argv)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	ta := newTestApp()
	if code := Run(ta.app, []string{"launcher", "--version"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ta.err.String())
	}
	out := ta.out.String()
	if !strings.HasPrefix(out, "launcher ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "commit") {
		t.Fatalf("--version printed %q; want one line naming the version and commit", out)
	}
}

func TestHelpNamesShortAliasesOnly(t *testing.T) {
	ta := newTestApp()
	if code := Run(ta.app, []string{"launcher", "run", "--help"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ta.err.String())
	}
	help := ta.out.String()
	if !strings.Contains(help, "--env value, -x value") || strings.Contains(help, "--nproc-per-node value") {
		t.Fatalf("help:\n%s", help)
	}
}

// A bare command line names no command: its usage goes to stderr, as a
// usage error's line does, with exit code 2.
func TestNoCommandIsAUsageError(t *testing.T) {
	ta := newTestApp()
	code := Run(ta.app, []string{"launcher"})
	if code != UsageExitCode || ta.out.Len() != 0 || !strings.Contains(ta.err.String(), "USAGE:") || !strings.Contains(ta.err.String(), "hostlist") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant exit 2 and the usage on stderr only", code, ta.out.String(), ta.err.String())
	}
	ta = newTestApp()
	if code := Run(ta.app, []string{"launcher", "--help"}); code != 0 || !strings.Contains(ta.out.String(), "USAGE:") || ta.err.Len() != 0 {
		t.Fatalf("--help: exit %d\nstdout %q\nstderr %q\nwant exit 0 and the usage on stdout", code, ta.out.String(), ta.err.String())
	}
}

func TestInCategoryAndDefaultText(t *testing.T) {
	n := NewCount(0, 1, 8)
	cmd := &cli.Command{Name: "run", Flags: append(
		InCategory("Placement", WithDefaultText(Flag(n, "nproc", []string{"np"}, "workers"), "one per GPU")),
		InCategory("Output", &cli.StringFlag{Name: "log-dir"}, &cli.BoolFlag{Name: "tag-output"})...)}
	var got []string
	for _, c := range cmd.VisibleFlagCategories() {
		for _, f := range c.Flags() {
			got = append(got, c.Name()+": "+f.Names()[0])
		}
	}
	if want := "Output: log-dir|Output: tag-output|Placement: nproc"; strings.Join(got, "|") != want {
		t.Errorf("categories %q; want %q", strings.Join(got, "|"), want)
	}
	if s := cmd.Flags[0].String(); !strings.Contains(s, "(default: one per GPU)") {
		t.Errorf("help line %q does not show the default text", s)
	}
}
