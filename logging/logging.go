// Package logging builds the commands' loggers from their flags, so that
// the agent and the launcher log alike.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// Formats a daemon's log takes (--log-format): auto is console lines when
// stderr is a terminal, JSON otherwise (journald, a container's log, a file).
const (
	FormatAuto    = "auto"
	FormatConsole = "console"
	FormatJSON    = "json"
)

// ParseFormat checks a --log-format value.
func ParseFormat(s string) (string, error) {
	switch s {
	case "", FormatAuto:
		return FormatAuto, nil
	case FormatConsole, FormatJSON:
		return s, nil
	}
	return "", fmt.Errorf("--log-format %q: want auto, console or json", s)
}

// ConsoleFor says whether format writes console lines to stderr now.
func ConsoleFor(format string) bool {
	if format != FormatAuto {
		return format == FormatConsole
	}
	_, err := unix.IoctlGetTermios(2, unix.TCGETS)
	return err == nil
}

// Config says what a command logs.
type Config struct {
	// Level is the least level logged; Verbose lowers it to debug.
	Level zapcore.Level
	// Verbose logs everything (--verbose).
	Verbose bool
	// Quiet logs nothing without Verbose: the launcher prints what a user
	// must see as plain lines of its own.
	Quiet bool
	// Console writes lines for a person to read instead of JSON, without
	// stack traces.
	Console bool
}

// New returns the logger cfg describes, writing to stderr.
func New(cfg Config) (*zap.Logger, error) {
	if cfg.Quiet && !cfg.Verbose {
		return zap.NewNop(), nil
	}
	zcfg := zap.NewProductionConfig()
	if cfg.Console {
		zcfg = zap.NewDevelopmentConfig()
		zcfg.DisableStacktrace = true
	}
	level := cfg.Level
	if cfg.Verbose {
		level = zapcore.DebugLevel
	}
	zcfg.Level = zap.NewAtomicLevelAt(level)
	return zcfg.Build()
}
