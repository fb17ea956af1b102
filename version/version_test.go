package version

import (
	"runtime/debug"
	"testing"
)

func TestIsPseudo(t *testing.T) {
	for v, want := range map[string]bool{
		"v0.0.0-20260818101500-50a169c1f2e3":        true,
		"v0.0.0-20260818101500-50a169c1f2e3+dirty":  true,
		"v1.3.1-0.20260818101500-50a169c1f2e3":      true,
		"v1.3.0-rc.1.0.20260818101500-50a169c1f2e3": true,
		"v1.2.0":                                false,
		"v1.2.0-rc.1":                           false,
		"(devel)":                               false,
		"v0.0.0-2026081810150-50a169c1f2e3":     false,
		"v0.0.0-20260818101500-50a169c1f2eX":    false,
		"v0.0-20260818101500-50a169c1f2e3":      false,
		"v0.0.0-.20260818101500-50a169c1f2e3":   false,
		"v0.0.0-RC.20260818101500-50a169c1f2e3": false,
		"0.0.0-20260818101500-50a169c1f2e3":     false,
	} {
		if got := isPseudo(v); got != want {
			t.Errorf("isPseudo(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestFormat(t *testing.T) {
	vcs := func(main string, kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/musterhq/muster", Version: main}}
		for i := 0; i+1 < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	const rev = "50a169c1f2e3d4c5b6a79881726354453627180a"
	tests := []struct {
		name    string
		release string
		bi      *debug.BuildInfo
		want    string
	}{
		{"go build in a clean checkout", "",
			vcs("v0.0.0-20260818101500-50a169c1f2e3", "vcs.revision", rev, "vcs.time", "2026-08-18T10:15:00Z", "vcs.modified", "false"),
			"launcher dev (commit 50a169c1f2e3 of 2026-08-18T10:15:00Z)"},
		{"local changes", "",
			vcs("v0.0.0-20260818101500-50a169c1f2e3+dirty", "vcs.revision", rev, "vcs.time", "2026-08-18T10:15:00Z", "vcs.modified", "true"),
			"launcher dev (commit 50a169c1f2e3 of 2026-08-18T10:15:00Z, with uncommitted changes)"},
		{"after a tag", "",
			vcs("v1.3.1-0.20260818101500-50a169c1f2e3", "vcs.revision", rev),
			"launcher dev (commit 50a169c1f2e3)"},
		{"release set by -ldflags", "1.2.0",
			vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-08-18T10:15:00Z"),
			"launcher 1.2.0 (commit 50a169c1f2e3 of 2026-08-18T10:15:00Z)"},
		{"go install at a tag", "", vcs("v1.2.0"),
			"launcher v1.2.0 (commit unknown: the build carries no VCS stamp)"},
		{"no version control information", "", vcs("(devel)"),
			"launcher dev (commit unknown: the build carries no VCS stamp)"},
		{"no build information", "", nil,
			"launcher dev (commit unknown: the build carries no VCS stamp)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := format("launcher", tt.release, tt.bi); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
