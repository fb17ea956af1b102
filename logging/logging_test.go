package logging

import (
	"testing"

	"go.uber.org/zap/zapcore"
)

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   Config
		least zapcore.Level // the least level logged
		none  bool          // nothing is logged
	}{
		{"agent", Config{Level: zapcore.InfoLevel}, zapcore.InfoLevel, false},
		{"agent, verbose", Config{Level: zapcore.InfoLevel, Verbose: true}, zapcore.DebugLevel, false},
		{"agent run", Config{Level: zapcore.ErrorLevel}, zapcore.ErrorLevel, false},
		{"launcher", Config{Quiet: true, Console: true}, 0, true},
		{"launcher, verbose", Config{Quiet: true, Console: true, Verbose: true}, zapcore.DebugLevel, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			log, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			core := log.Core()
			if tt.none {
				if core.Enabled(zapcore.FatalLevel) {
					t.Fatal("a quiet logger logs")
				}
				return
			}
			if !core.Enabled(tt.least) || tt.least > zapcore.DebugLevel && core.Enabled(tt.least-1) {
				t.Fatalf("level: logs %v: %v, %v: %v; want the least %v", tt.least, core.Enabled(tt.least), tt.least-1, core.Enabled(tt.least-1), tt.least)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]string{"": FormatAuto, "auto": FormatAuto, "console": FormatConsole, "json": FormatJSON, "text": "", "JSON": ""} {
		got, err := ParseFormat(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if !ConsoleFor(FormatConsole) || ConsoleFor(FormatJSON) {
		t.Error("an explicit format is not what ConsoleFor says")
	}
}
