package cmdline

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Foreign is another launcher's flag (torchrun's, mpirun's) that a command
// knows without taking it as its own: its users type it out of habit, and
// "unknown flag" would tell them nothing.
type Foreign struct {
	// Name is the other launcher's spelling, without dashes.
	Name string
	// TakesValue says whether the flag is followed by a value.
	TakesValue bool
	// Note, for a flag with nothing to do here, says why; the command runs
	// as without the flag.
	Note string
	// Instead, for a flag whose meaning differs here, says what to do
	// instead; the command line is refused with it.
	Instead string
}

// ForeignFlags are hidden flags for spellings, so that they parse, values
// included, and stay out of help.
func ForeignFlags(spellings []Foreign) []cli.Flag {
	var flags []cli.Flag
	for _, f := range spellings {
		if f.TakesValue {
			flags = append(flags, &cli.StringFlag{Name: f.Name, Hidden: true})
		} else {
			flags = append(flags, &cli.BoolFlag{Name: f.Name, Hidden: true})
		}
	}
	return flags
}

// CheckForeign refuses the command line, with exit code 2 and one line
// saying what to do instead, when it gives a spelling whose meaning differs;
// otherwise it says on stderr, once however often it was given, that each
// spelling given does nothing here.
func CheckForeign(c *cli.Context, spellings []Foreign) error {
	var notes []string
	for _, f := range spellings {
		if !c.IsSet(f.Name) {
			continue
		}
		if f.Instead != "" {
			return cli.Exit(fmt.Sprintf("%s: %s", dashed(f.Name), f.Instead), UsageExitCode)
		}
		notes = append(notes, fmt.Sprintf("%s: %s does nothing here: %s", c.App.Name, dashed(f.Name), f.Note))
	}
	for _, n := range notes {
		fmt.Fprintln(c.App.ErrWriter, n)
	}
	return nil
}

// dashed is a flag's name as help writes it: -N, --standalone.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
