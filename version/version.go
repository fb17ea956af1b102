// Package version says which build of muster is running: a release version
// set when the binaries are built, and the commit they were built from.
package version

import (
	"fmt"
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

// isPseudo says whether v is a version the go command makes up for an
// untagged commit (v0.0.0-20260101120000-abcdef123456, v1.3.1-0.2026...,
// +dirty when modified). Written out rather than a regexp, whose counted
// repetitions compile to a long program in every process at start-up.
func isPseudo(v string) bool {
	v = strings.TrimSuffix(v, "+dirty")
	// The end is -yyyymmddhhmmss-abcdef123456.
	n := len(v)
	if n < 28 || v[n-13] != '-' || !all(v[n-12:], "0123456789abcdef") || !all(v[n-27:n-13], "0123456789") {
		return false
	}
	// Before it: vX.Y.Z- and, for a commit after a tag, a prerelease ending in '.'.
	base, pre, ok := strings.Cut(v[:n-27], "-")
	if !ok || (pre != "" && (len(pre) < 2 || !strings.HasSuffix(pre, ".") || !all(pre, "0123456789abcdefghijklmnopqrstuvwxyz."))) {
		return false
	}
	nums := strings.Split(strings.TrimPrefix(base, "v"), ".")
	if !strings.HasPrefix(base, "v") || len(nums) != 3 {
		return false
	}
	for _, s := range nums {
		if s == "" || !all(s, "0123456789") {
			return false
		}
	}
	return true
}

// all says whether every byte of s is one of chars.
func all(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(chars, s[i]) < 0 {
			return false
		}
	}
	return true
}

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
		if mv := bi.Main.Version; v == "" && mv != "" && mv != "(devel)" && !isPseudo(mv) {
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
