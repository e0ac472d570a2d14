package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/internal/textdist"
)

// Severity tells whether a Problem stops loading.
type Severity string

// Severities of a Problem.
const (
	// SeverityError is a problem that makes the configuration unusable (or,
	// for a skill, excludes that skill).
	SeverityError Severity = "error"
	// SeverityWarning is a deviation that is tolerated.
	SeverityWarning Severity = "warning"
)

// ErrInvalid is wrapped by every *Error: callers branch on it with
// errors.Is to tell a configuration problem from an I/O failure.
var ErrInvalid = errors.New("invalid configuration")

// Problem is one thing wrong with the configuration, located in its file.
type Problem struct {
	// File is the path relative to the directory given to Load (slash
	// separated).
	File string `json:"file"`
	// Line and Col are 1-based; 0 when the problem concerns the whole file.
	Line int `json:"line,omitempty"`
	Col  int `json:"col,omitempty"`
	// Path is the key path in the file, e.g. "sandbox.max_memory" or
	// "mcp.servers[0].server_id"; empty for the whole file.
	Path string `json:"path,omitempty"`
	// Message says what is wrong; Hint says how to fix it.
	Message  string   `json:"message"`
	Hint     string   `json:"hint,omitempty"`
	Severity Severity `json:"severity"`
}

// Error formats the problem as file:line:col: path: message; hint. Warnings
// carry "warning: " after the position.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", p.Line, p.Col)
	}
	b.WriteString(": ")
	if p.Severity == SeverityWarning {
		b.WriteString("warning: ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	if p.Hint != "" {
		b.WriteString("; ")
		b.WriteString(p.Hint)
	}
	return b.String()
}

// Error is returned by Load and LoadAssistant when the configuration has
// at least one error. It lists every error found and the warnings beside
// them, sorted by file and position. Skill problems never fail loading and
// are not in it: they are reported in Gateway.Problems (and
// Assistant.Problems) once the rest loads.
type Error struct {
	Problems []Problem
}

// Error lists the problems one per line.
func (e *Error) Error() string {
	lines := make([]string, 0, len(e.Problems)+1)
	n := len(e.Errors())
	lines = append(lines, fmt.Sprintf("invalid configuration: %d error(s)", n))
	for _, p := range e.Problems {
		lines = append(lines, "  "+p.Error())
	}
	return strings.Join(lines, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errors returns the problems of severity error.
func (e *Error) Errors() []Problem { return filterSeverity(e.Problems, SeverityError) }

func filterSeverity(ps []Problem, s Severity) []Problem {
	var out []Problem
	for _, p := range ps {
		if p.Severity == s {
			out = append(out, p)
		}
	}
	return out
}

// problems collects Problems while loading.
type problems struct {
	list []Problem
}

func (ps *problems) add(p Problem) { ps.list = append(ps.list, p) }

func (ps *problems) hasErrors() bool {
	for _, p := range ps.list {
		if p.Severity == SeverityError {
			return true
		}
	}
	return false
}

func sortProblems(list []Problem) {
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// suggest returns a "did you mean" hint naming the candidate closest to
// word, or "" when none is close.
func suggest(word string, candidates []string) string {
	if len(word) >= 3 {
		for _, c := range candidates {
			if strings.HasPrefix(c, word) {
				return fmt.Sprintf("did you mean %q?", c)
			}
		}
	}
	best, bestDist := "", -1
	for _, c := range candidates {
		d := textdist.Levenshtein(strings.ToLower(word), strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := max(1, min(3, len(word)/3))
	if best == "" || bestDist > limit {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", best)
}
