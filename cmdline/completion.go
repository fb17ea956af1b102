package cmdline

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// CompletionCommand is `NAME completion bash|zsh|fish`: a script that
// completes the app's commands and each command's flags, made from the
// app's own tree so that it never lists a flag the app does not take.
func CompletionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: "Load it in your shell's start-up file, e.g.\n" +
			`   source <(launcher completion bash)       # ~/.bashrc` + "\n" +
			`   source <(launcher completion zsh)        # ~/.zshrc` + "\n" +
			`   launcher completion fish | source        # ~/.config/fish/config.fish`,
		Action: func(c *cli.Context) error {
			if sh := c.Args().First(); c.NArg() != 1 || !slices.Contains([]string{"bash", "zsh", "fish"}, sh) {
				return Usagef(c, "name one shell: bash, zsh or fish")
			}
			return WriteCompletion(c.App.Writer, c.App, c.Args().First())
		},
	}
}

// WriteCompletion writes app's completion script for shell.
func WriteCompletion(w io.Writer, app *cli.App, shell string) error {
	switch shell {
	case "bash":
		return bashCompletion(w, app, false)
	case "zsh":
		return bashCompletion(w, app, true)
	case "fish":
		return fishCompletion(w, app)
	}
	return fmt.Errorf("completion: %q is not bash, zsh or fish", shell)
}

// visibleFlags are a command's flag names as typed: --name and -n.
func visibleFlags(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		for _, n := range f.Names() {
			if len(n) == 1 {
				out = append(out, "-"+n)
			} else {
				out = append(out, "--"+n)
			}
		}
	}
	slices.Sort(out)
	return out
}

func commandNames(app *cli.App) []string {
	var out []string
	for _, c := range app.VisibleCommands() {
		out = append(out, c.Name)
	}
	return out
}

// bashCompletion completes the command in the first word, then that
// command's flags; zsh runs it through its bash compatibility.
func bashCompletion(w io.Writer, app *cli.App, zsh bool) error {
	fn := "_" + strings.ReplaceAll(app.Name, "-", "_") + "_complete"
	var b strings.Builder
	if zsh {
		b.WriteString("autoload -U +X bashcompinit && bashcompinit\n")
	}
	fmt.Fprintf(&b, "%s() {\n\tlocal cur=\"${COMP_WORDS[COMP_CWORD]}\" words\n", fn)
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\twords=%q\n", strings.Join(append(commandNames(app), visibleFlags(app.Flags)...), " "))
	b.WriteString("\telse\n\t\tcase \"${COMP_WORDS[1]}\" in\n")
	for _, c := range app.VisibleCommands() {
		words := visibleFlags(c.Flags)
		for _, sub := range c.VisibleCommands() {
			words = append(words, sub.Name)
		}
		fmt.Fprintf(&b, "\t\t%s) words=%q ;;\n", strings.Join(c.Names(), "|"), strings.Join(words, " "))
	}
	b.WriteString("\t\t*) words=\"\" ;;\n\t\tesac\n\tfi\n")
	b.WriteString("\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\n")
	fmt.Fprintf(&b, "complete -o default -F %s %s\n", fn, app.Name)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishCompletion lists the commands while none is given, then the
// command's flags.
func fishCompletion(w io.Writer, app *cli.App) error {
	var b strings.Builder
	for _, c := range app.VisibleCommands() {
		fmt.Fprintf(&b, "complete -c %s -f -n '__fish_use_subcommand' -a %s -d %q\n", app.Name, c.Name, c.Usage)
	}
	for _, c := range app.VisibleCommands() {
		for _, f := range visibleFlags(c.Flags) {
			opt := "-l " + strings.TrimPrefix(f, "--")
			if !strings.HasPrefix(f, "--") {
				opt = "-s " + strings.TrimPrefix(f, "-")
			}
			fmt.Fprintf(&b, "complete -c %s -n '__fish_seen_subcommand_from %s' %s\n", app.Name, c.Name, opt)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
