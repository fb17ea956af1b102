package cmdline

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// runsCommand holds the commands marked by RunsCommand.
var runsCommand = map[*cli.Command]bool{}

// RunsCommand marks cmd as a command whose arguments are a program's
// command line (launcher run, agent run): its first argument starts that
// command line, whose own flags are never taken for cmd's, with "--"
// before it or not.
func RunsCommand(cmd *cli.Command) *cli.Command {
	runsCommand[cmd] = true
	return cmd
}

// interspersed moves the flags that follow a command's arguments before
// them, as kubectl's and docker's users type them (`launcher logs JOB -f`):
// urfave/cli, like Go's flag package, stops at the first argument. Nothing
// moves past "--", past the first argument of a command marked by
// RunsCommand, or in a command that parses its own flags.
func interspersed(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	out := []string{args[0]}
	flags, subs := app.Flags, app.Commands
	stopAtArg, own := false, false
	var moved, positional []string
	rest := args[1:]
	for len(rest) > 0 && !own && rest[0] != "--" && !(stopAtArg && len(positional) > 0) {
		a := rest[0]
		if len(a) > 1 && a[0] == '-' {
			n := 1
			if !strings.Contains(a, "=") && takesValue(flags, a) && len(rest) > 1 {
				n = 2
			}
			moved, rest = append(moved, rest[:n]...), rest[n:]
			continue
		}
		rest = rest[1:]
		if i := slices.IndexFunc(subs, func(c *cli.Command) bool { return c.HasName(a) }); i >= 0 && len(positional) == 0 {
			c := subs[i]
			out = append(append(out, moved...), a)
			moved = nil
			flags, subs, stopAtArg, own = c.Flags, c.Subcommands, runsCommand[c], c.SkipFlagParsing
			continue
		}
		positional = append(positional, a)
	}
	return slices.Concat(out, moved, positional, rest)
}

// takesValue says whether the flag arg (-name or --name) is one of flags
// that takes a value; an unknown flag is left for urfave/cli to refuse.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	for _, f := range flags {
		names := f.Names()
		if a, ok := f.(aliased); ok {
			names = a.GenericFlag.Names()
		}
		if slices.Contains(names, name) {
			v, ok := f.(cli.DocGenerationFlag)
			return ok && v.TakesValue()
		}
	}
	return false
}
