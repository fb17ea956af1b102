package cmdline

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func completionApp() *cli.App {
	return &cli.App{Name: "launcher", Commands: []*cli.Command{
		{Name: "run", Flags: []cli.Flag{&cli.IntFlag{Name: "nproc"}, &cli.StringFlag{Name: "nnodes", Aliases: []string{"n"}},
			&cli.BoolFlag{Name: "secret", Hidden: true}}},
		{Name: "jobs", Aliases: []string{"job"}, Flags: []cli.Flag{&cli.StringFlag{Name: "output", Aliases: []string{"o"}}}},
		CompletionCommand(),
	}}
}

// The bash script, loaded in a real bash, completes commands first and
// then the command's own visible flags.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script bytes.Buffer
	if err := WriteCompletion(&script, completionApp(), "bash"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words string
		want  string
	}{
		{"launcher r", "run"},
		{"launcher j", "jobs"},
		{"launcher run --n", "--nnodes --nproc"},
		{"launcher run --s", ""},
		{"launcher job -", "--output -o"},
		{"launcher jobs --o", "--output"},
	} {
		words := strings.Fields(tt.words)
		if strings.HasSuffix(tt.words, " ") {
			words = append(words, "")
		}
		cmd := exec.Command(bash, "-c", script.String()+`
COMP_WORDS=(`+strings.Join(words, " ")+`); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _launcher_complete; echo "${COMPREPLY[@]}"`)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", tt.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tt.want {
			t.Errorf("%q completes to %q, want %q", tt.words, got, tt.want)
		}
	}
}

func TestFishCompletion(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCompletion(&b, completionApp(), "fish"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-a run", "__fish_seen_subcommand_from run' -l nproc", "__fish_seen_subcommand_from jobs' -s o"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("fish script lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "secret") {
		t.Error("a hidden flag is completed")
	}
	if err := WriteCompletion(&b, completionApp(), "tcsh"); err == nil {
		t.Error("tcsh accepted")
	}
}
