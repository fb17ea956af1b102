package cmdline

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestInterspersed(t *testing.T) {
	output := []cli.Flag{&cli.StringFlag{Name: "output", Aliases: []string{"o"}}}
	run := RunsCommand(&cli.Command{Name: "run", Flags: []cli.Flag{Flag(NewCount(0, 0, 9), "nproc", []string{"np"}, "workers"),
		&cli.BoolFlag{Name: "tag-output"}}})
	app := &cli.App{Name: "launcher", Flags: []cli.Flag{&cli.BoolFlag{Name: "verbose"}}, Commands: []*cli.Command{
		run,
		{Name: "logs", Flags: []cli.Flag{&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}}, &cli.IntFlag{Name: "rank"}}},
		{Name: "jobs", Flags: output},
		{Name: "hostlist", Subcommands: []*cli.Command{{Name: "expand", Flags: output}}},
		{Name: "bench", SkipFlagParsing: true},
	}}
	for _, tc := range []struct{ in, want string }{
		{"logs JOB -f", "logs -f JOB"},
		{"logs JOB --rank 1", "logs --rank 1 JOB"},
		{"logs JOB --rank=1 -f", "logs --rank=1 -f JOB"},
		{"logs -f JOB", "logs -f JOB"},
		{"jobs JOB -o json", "jobs -o json JOB"},
		{"jobs A -o json B", "jobs -o json A B"},
		{"hostlist expand node[01-16] -o json", "hostlist expand -o json node[01-16]"},
		// a value that looks like a command is the flag's
		{"jobs -o logs A", "jobs -o logs A"},
		// nothing after --
		{"jobs A -- -o json", "jobs A -- -o json"},
		// a flag without its value is left for urfave/cli to refuse
		{"logs JOB --rank", "logs --rank JOB"},
		{"--verbose logs JOB -f", "--verbose logs -f JOB"},
		// the worker's flags stay the worker's
		{"run -np 2 python train.py -np 3", "run -np 2 python train.py -np 3"},
		{"run python train.py --tag-output", "run python train.py --tag-output"},
		{"run -np 2 -- python -np 3", "run -np 2 -- python -np 3"},
		// bench parses its own
		{"bench allreduce -b 8", "bench allreduce -b 8"},
		{"", ""},
	} {
		in := append([]string{"launcher"}, strings.Fields(tc.in)...)
		want := append([]string{"launcher"}, strings.Fields(tc.want)...)
		if got := interspersed(app, in); !slices.Equal(got, want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, want)
		}
	}
}
