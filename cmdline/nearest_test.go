package cmdline

import (
	"testing"

	"github.com/urfave/cli/v2"
)

func TestNearest(t *testing.T) {
	flags := []cli.Flag{
		Flag(NewCount(0, 1, 9), "nproc", []string{"np", "nproc-per-node"}, "workers"),
		&cli.StringFlag{Name: "output-ranks"},
		&cli.StringFlag{Name: "timeout"},
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}},
		&cli.StringFlag{Name: "hidden-flag", Hidden: true},
	}
	for _, tc := range []struct{ typed, want string }{
		{"nprocs", "nproc"},
		{"nproc-per-nod", "nproc-per-node"},
		{"output-rank", "output-ranks"},
		{"outptu-rank", "output-ranks"},
		{"tiemout", "timeout"},
		{"verbos", "verbose"},
		{"hidden-flg", ""},
		{"frob", ""},
		{"npx", "np"},
		{"vv", ""},
		{"standalone", ""},
	} {
		if got := nearest(tc.typed, flags); got != tc.want {
			t.Errorf("nearest(%q) = %q; want %q", tc.typed, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "abc", 0},
		{"abc", "ab", 1},
		{"ab", "abc", 1},
		{"abc", "abd", 1},
		{"acb", "abc", 1},
		{"kitten", "sitting", 3},
		{"", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
