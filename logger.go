package agentbox

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// SlogLogger adapts a *slog.Logger to the hclog.Logger the packages below
// log through: levels map one to one (Trace is below slog's Debug), a
// Named logger adds a "logger" attribute with the dotted name, With adds
// attributes. Gateways on log/slog pass theirs to Options.Logger; those on
// hclog set Options.HCLogger instead.
func SlogLogger(l *slog.Logger) hclog.Logger { return &slogLogger{l: l} }

// levelTrace is hclog's Trace on slog's scale.
const levelTrace = slog.LevelDebug - 4

type slogLogger struct {
	l       *slog.Logger
	name    string
	implied []any
}

var slogLevels = map[hclog.Level]slog.Level{
	hclog.Trace: levelTrace, hclog.Debug: slog.LevelDebug, hclog.Info: slog.LevelInfo,
	hclog.Warn: slog.LevelWarn, hclog.Error: slog.LevelError,
}

func (s *slogLogger) Log(level hclog.Level, msg string, args ...any) {
	lv, ok := slogLevels[level]
	if !ok {
		if level == hclog.Off || level == hclog.NoLevel {
			return
		}
		lv = slog.LevelInfo
	}
	s.l.Log(context.Background(), lv, msg, args...)
}

func (s *slogLogger) Trace(msg string, args ...any) { s.Log(hclog.Trace, msg, args...) }
func (s *slogLogger) Debug(msg string, args ...any) { s.Log(hclog.Debug, msg, args...) }
func (s *slogLogger) Info(msg string, args ...any)  { s.Log(hclog.Info, msg, args...) }
func (s *slogLogger) Warn(msg string, args ...any)  { s.Log(hclog.Warn, msg, args...) }
func (s *slogLogger) Error(msg string, args ...any) { s.Log(hclog.Error, msg, args...) }

func (s *slogLogger) enabled(l slog.Level) bool { return s.l.Enabled(context.Background(), l) }
func (s *slogLogger) IsTrace() bool             { return s.enabled(levelTrace) }
func (s *slogLogger) IsDebug() bool             { return s.enabled(slog.LevelDebug) }
func (s *slogLogger) IsInfo() bool              { return s.enabled(slog.LevelInfo) }
func (s *slogLogger) IsWarn() bool              { return s.enabled(slog.LevelWarn) }
func (s *slogLogger) IsError() bool             { return s.enabled(slog.LevelError) }

func (s *slogLogger) ImpliedArgs() []any { return s.implied }

func (s *slogLogger) With(args ...any) hclog.Logger {
	return &slogLogger{l: s.l.With(args...), name: s.name, implied: append(append([]any(nil), s.implied...), args...)}
}

func (s *slogLogger) Name() string { return s.name }

func (s *slogLogger) Named(name string) hclog.Logger {
	if s.name != "" {
		name = s.name + "." + name
	}
	return s.ResetNamed(name)
}

func (s *slogLogger) ResetNamed(name string) hclog.Logger {
	return &slogLogger{l: s.l.With("logger", name), name: name, implied: s.implied}
}

// SetLevel does nothing: the slog handler decides what is logged.
func (s *slogLogger) SetLevel(hclog.Level) {}

func (s *slogLogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if s.enabled(slogLevels[l]) {
			return l
		}
	}
	return hclog.Off
}

func (s *slogLogger) StandardLogger(o *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(s.StandardWriter(o), "", 0)
}

func (s *slogLogger) StandardWriter(o *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if o != nil && o.ForceLevel != hclog.NoLevel {
		level = o.ForceLevel
	}
	return writerFunc(func(p []byte) (int, error) {
		s.Log(level, strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
