package cmdline

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestForeign(t *testing.T) {
	spellings := []Foreign{
		{Name: "standalone", Note: "it is alone already"},
		{Name: "tee", TakesValue: true, Note: "output is printed anyway"},
		{Name: "node-rank", TakesValue: true, Instead: "use agent run"},
		{Name: "N", TakesValue: true, Instead: "say -n or --nproc"},
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		stderr   string
		wantArgv string
	}{
		{"not given", []string{"run", "x"}, 0, "", "x"},
		{"a no-op", []string{"run", "--standalone", "x"}, 0, "launcher: --standalone does nothing here: it is alone already\n", "x"},
		{"said once", []string{"run", "--standalone", "-standalone", "x"}, 0, "launcher: --standalone does nothing here: it is alone already\n", "x"},
		{"its value taken", []string{"run", "--tee", "3", "x", "y"}, 0, "launcher: --tee does nothing here: output is printed anyway\n", "x y"},
		{"two no-ops", []string{"run", "--tee=3", "--standalone", "x"}, 0,
			"launcher: --standalone does nothing here: it is alone already\nlauncher: --tee does nothing here: output is printed anyway\n", "x"},
		{"refused", []string{"run", "--node-rank", "0", "x"}, 2, "launcher: --node-rank: use agent run\n", ""},
		{"refused among no-ops", []string{"run", "--standalone", "-N", "2", "x"}, 2, "launcher: -N: say -n or --nproc\n", ""},
		{"the command's own", []string{"run", "x", "--node-rank", "1"}, 0, "", "x --node-rank 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errb bytes.Buffer
			var argv []string
			app := &cli.App{Name: "launcher", ErrWriter: &errb, Commands: []*cli.Command{RunsCommand(&cli.Command{
				Name:  "run",
				Flags: ForeignFlags(spellings),
				Action: func(c *cli.Context) error {
					if err := CheckForeign(c, spellings); err != nil {
						return err
					}
					argv = c.Args().Slice()
					return nil
				},
			})}}
			code := Run(app, append([]string{"launcher"}, tt.args...))
			if code != tt.code || errb.String() != tt.stderr || strings.Join(argv, " ") != tt.wantArgv {
				t.Fatalf("exit %d, stderr %q, argv %q; want exit %d, %q, %q", code, errb.String(), argv, tt.code, tt.stderr, tt.wantArgv)
			}
		})
	}
}
