package cmdline

import (
	"fmt"
	"strings"
)

// Command help that shows flags in groups, in the order categories gives
// them and each in the order it was declared (urfave/cli's own templates
// sort both by name), then examples.

// CommandHelpHeader is the start of a command's grouped help.
const CommandHelpHeader = `NAME:
   {{template "helpNameTemplate" .}}

USAGE:
   {{template "usageTemplate" .}}
`

// AppHelpHeader is the start of a program's grouped help: its commands too.
const AppHelpHeader = `NAME:
   {{template "helpNameTemplate" .}}

USAGE:
   {{.HelpName}} [options]{{if .VisibleCommands}} | {{.HelpName}} COMMAND [options]{{end}}
{{if .Version}}
VERSION:
   {{.Version}}
{{end}}{{if .VisibleCommands}}
COMMANDS:{{template "visibleCommandTemplate" .}}
{{end}}`

// GroupedHelp is header, then the flags of each of categories under its
// name (the flags of none last, as "Help"), then examples.
func GroupedHelp(header string, categories []string, examples string) string {
	var b strings.Builder
	b.WriteString(header + "\nOPTIONS:")
	for _, cat := range append(categories, "") {
		title := cat
		if title == "" {
			title = "Help"
		}
		fmt.Fprintf(&b, "\n   %s:{{range .VisibleFlags}}{{if eq .GetCategory %q}}\n     {{.String}}{{end}}{{end}}\n", title, cat)
	}
	b.WriteString("\nEXAMPLES:\n" + examples + "\n")
	return b.String()
}
