// Package version says which build of muster is running: a release version
// set when the binaries are built, and the commit they were built from.
package version

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
)

// Version is the release version, set when building a release:
//
//	go build -ldflags "-X github.com/musterhq/muster/version.Version=1.2.0" ./cmd/...
//
// Without it, a build is "dev", or the module's version when it was built
// as a dependency at a tagged version (go install ...@v1.2.0).
var Version string

// pseudo matches the versions the go command makes up for untagged commits
// (v0.0.0-20260101120000-abcdef123456, +dirty when modified).
var pseudo = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+-(?:[0-9a-z.]+\.)?(?:0\.)?[0-9]{14}-[0-9a-f]{12}(?:\+dirty)?$`)

// String is what --version prints for prog, in one line: the version, the
// commit with the time it was made, and whether the tree had local changes.
func String(prog string) string {
	bi, _ := debug.ReadBuildInfo()
	return format(prog, Version, bi)
}

func format(prog, release string, bi *debug.BuildInfo) string {
	v, settings := versionOf(release, bi)
	rev := settings["vcs.revision"]
	if rev == "" {
		return fmt.Sprintf("%s %s (commit unknown: the build carries no VCS stamp)", prog, v)
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	commit := "commit " + rev
	if t := settings["vcs.time"]; t != "" {
		commit += " of " + t
	}
	if settings["vcs.modified"] == "true" {
		commit += ", with uncommitted changes"
	}
	return fmt.Sprintf("%s %s (%s)", prog, v, commit)
}

// versionOf is the build's version (the release, else the module's, else
// "dev") and its build settings (vcs.revision, vcs.time, vcs.modified).
func versionOf(release string, bi *debug.BuildInfo) (string, map[string]string) {
	v := release
	settings := map[string]string{}
	if bi != nil {
		if mv := bi.Main.Version; v == "" && mv != "" && mv != "(devel)" && !pseudo.MatchString(mv) {
			v = strings.TrimSuffix(mv, "+dirty")
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	if v == "" {
		v = "dev"
	}
	return v, settings
}

// Short is the version and commit in one word ("dev+94de01bcf85c",
// "1.2.0"), as a node tells the others through gossip.
func Short() string {
	bi, _ := debug.ReadBuildInfo()
	v, settings := versionOf(Version, bi)
	if rev := settings["vcs.revision"]; v == "dev" && len(rev) >= 12 {
		v += "+" + rev[:12]
	}
	return v
}

// Parts is the version and the full commit apart, as metrics label them;
// the commit is "unknown" when the build carries no VCS stamp.
func Parts() (v, commit string) {
	bi, _ := debug.ReadBuildInfo()
	v, settings := versionOf(Version, bi)
	commit = settings["vcs.revision"]
	if commit == "" {
		commit = "unknown"
	}
	return v, commit
}
