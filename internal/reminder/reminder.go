// Package reminder removes the <system-reminder> blocks that Claude Code
// (2.1.330 and later) appends to tool results. They are the CLI's notes to
// the model (how to treat the output, that a file changed, how many tokens
// are left), not the tool's output. The claude runner strips them from the
// tool events a client sees; the scripted models strip them before quoting
// a tool's output back, as a real model would not echo them.
package reminder

import (
	"slices"
	"strings"
)

// Strip removes every complete <system-reminder>…</system-reminder> block
// from s, trimming the whitespace where a block was cut out and joining the
// remaining parts with one newline. An unterminated block is kept, so output
// that merely mentions the tag is not cut.
func Strip(s string) string {
	const open, end = "<system-reminder>", "</system-reminder>"
	if !strings.Contains(s, open) {
		return s
	}
	var parts []string
	rest := s
	for {
		i := strings.Index(rest, open)
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], end)
		if j < 0 {
			break
		}
		parts = append(parts, strings.TrimRight(rest[:i], " \t\n"))
		rest = strings.TrimLeft(rest[i+j+len(end):], " \t\n")
	}
	parts = append(parts, rest)
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), "\n")
}
