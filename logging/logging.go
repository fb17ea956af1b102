// Package logging builds the commands' loggers from their flags, so that
// the agent and the launcher log alike.
package logging

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

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
