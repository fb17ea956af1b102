package cmdline

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/version"
)

// UsageExitCode is the exit code of a command line that does not parse, as
// for most Unix tools.
const UsageExitCode = 2

// Flag is a flag holding value under name and any number of other names,
// which may be mixed on one command line: all names set the same value (the
// last one given wins; a List keeps every one). urfave/cli's own aliases
// refuse to be mixed and copy a value from name to name, which repeats the
// values of a list. Help lists the one-letter aliases beside the name; usage
// should mention the longer ones.
func Flag(value cli.Generic, name string, aliases []string, usage string) cli.Flag {
	return aliased{&cli.GenericFlag{Name: name, Aliases: aliases, Value: value, Usage: usage}}
}

// WithEnv lets a flag made by Flag also be set from the environment
// variable env, as urfave/cli's own flags are with EnvVars.
func WithEnv(f cli.Flag, env string) cli.Flag {
	if a, ok := f.(aliased); ok {
		a.EnvVars = append(a.EnvVars, env)
	}
	return f
}

// InCategory puts flags under category in their command's help, so that a
// command with many flags shows them in groups.
func InCategory(category string, flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		switch f := f.(type) {
		case aliased:
			f.Category = category
		case *cli.GenericFlag:
			f.Category = category
		case *cli.StringFlag:
			f.Category = category
		case *cli.BoolFlag:
			f.Category = category
		default:
			panic(fmt.Sprintf("cmdline.InCategory: flag %s of type %T", f.Names()[0], f))
		}
	}
	return flags
}

// WithDefaultText makes help show text as the default of a flag made by
// Flag, where the zero value stands for a default that other flags decide.
func WithDefaultText(f cli.Flag, text string) cli.Flag {
	if a, ok := f.(aliased); ok {
		a.DefaultText = text
	}
	return f
}

type aliased struct{ *cli.GenericFlag }

// Names is the first name only, so that urfave/cli copies nothing between
// names that share one value.
func (f aliased) Names() []string { return []string{f.Name} }

// String is the flag's line of help.
func (f aliased) String() string {
	short := *f.GenericFlag
	short.Aliases = nil
	for _, a := range f.Aliases {
		if utf8.RuneCountInString(a) == 1 {
			short.Aliases = append(short.Aliases, a)
		}
	}
	return short.String()
}

// Run runs app with args (os.Args) and returns its exit code. Flags may
// follow a command's arguments (see interspersed). Every error is
// printed once, as one line "NAME: message"; a command line that does not
// parse says what is wrong and where to look, with exit code 2. app gets
// --version: the version and commit of this build.
func Run(app *cli.App, args []string) int {
	args = interspersed(app, args)
	prepare(app, args)
	err := app.Run(args)
	if err == nil {
		return 0
	}
	code := 1
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintln(app.ErrWriter, app.Name+": "+msg)
	}
	return code
}

func prepare(app *cli.App, args []string) {
	if app.HelpName == "" {
		app.HelpName = app.Name
	}
	// Run prints errors and returns codes; urfave/cli must not exit.
	app.ExitErrHandler = func(*cli.Context, error) {}
	app.Version = version.String(app.Name)
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and the commit built from"}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, c.App.Version) }
	if app.Action == nil {
		app.Action = func(c *cli.Context) error {
			if c.NArg() > 0 {
				return Usagef(c, "unknown command %s", showArg(c.Args().First()))
			}
			// No command is a usage error too: the usage goes to stderr.
			w := c.App.Writer
			c.App.Writer = c.App.ErrWriter
			defer func() { c.App.Writer = w }()
			if err := cli.ShowAppHelp(c); err != nil {
				return err
			}
			return cli.Exit("", UsageExitCode)
		}
	}
	app.OnUsageError = onUsageError(app.HelpName, args, app.Flags)
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := prefix + " " + c.Name
			c.OnUsageError = onUsageError(name, args, c.Flags)
			walk(name, c.Subcommands)
		}
	}
	walk(app.HelpName, app.Commands)
}

func onUsageError(helpName string, args []string, flags []cli.Flag) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return cli.Exit(explain(err, args, flags)+"; see "+helpName+" --help", UsageExitCode)
	}
}

// Usagef is a usage error found after the flags parsed: one line, what is
// wrong and where to look, exit code 2.
func Usagef(c *cli.Context, format string, a ...any) error {
	return cli.Exit(fmt.Sprintf(format, a...)+"; see "+helpName(c)+" --help", UsageExitCode)
}

// helpName is the command's full name, as its help is asked for.
func helpName(c *cli.Context) string {
	if c.Command != nil && c.Command.HelpName != "" {
		return c.Command.HelpName
	}
	return c.App.HelpName
}

// explain turns a flag-parsing error into what the user wrote and what is
// wrong with it, naming the flag as the user spelled it; an unknown flag
// gets the nearest of flags' names.
func explain(err error, args []string, flags []cli.Flag) string {
	// The errors of Go's flag package, which urfave/cli parses with;
	// compiled here, on a usage error, rather than in every process.
	const quoted = `"(?:[^"\\]|\\.)*"`
	badValue := regexp.MustCompile(`^invalid value (` + quoted + `) for flag -(\S+): (.*)$`)
	badBool := regexp.MustCompile(`^invalid boolean value (` + quoted + `) for -(\S+): (.*)$`)
	unknownFlag := regexp.MustCompile(`^flag provided but not defined: -(\S+)$`)
	needsValue := regexp.MustCompile(`^flag needs an argument: -(\S+)$`)
	twoForms := regexp.MustCompile(`^Cannot use two forms of the same flag: (\S+) (\S+)$`)
	msg := err.Error()
	if m := badValue.FindStringSubmatch(msg); m != nil {
		v, _ := strconv.Unquote(m[1])
		why := m[3]
		if why == "parse error" {
			why = "not understood"
		}
		return fmt.Sprintf("%s %s: %s", spelled(m[2], args), showArg(v), why)
	}
	if m := badBool.FindStringSubmatch(msg); m != nil {
		v, _ := strconv.Unquote(m[1])
		return fmt.Sprintf("%s=%s: want true or false", spelled(m[2], args), showArg(v))
	}
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		if near := nearest(m[1], flags); near != "" {
			return fmt.Sprintf("unknown flag %s (did you mean %s?)", spelled(m[1], args), dashed(near))
		}
		return "unknown flag " + spelled(m[1], args)
	}
	if m := needsValue.FindStringSubmatch(msg); m != nil {
		return spelled(m[1], args) + " needs a value"
	}
	if m := twoForms.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s and %s are the same flag: give it once", spelled(m[1], args), spelled(m[2], args))
	}
	return msg
}

// spelled is flag name as the command line wrote it: -np, --nproc, -x.
func spelled(name string, args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		flag, _, _ := strings.Cut(a, "=")
		if flag == "-"+name || flag == "--"+name {
			return flag
		}
	}
	if utf8.RuneCountInString(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// showArg writes a command-line word as it is when that is unambiguous,
// quoted when it is empty or holds spaces, control characters or bytes
// that are not UTF-8.
func showArg(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
