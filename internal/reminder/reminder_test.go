package reminder

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStrip(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"none":            {"hello\n", "hello\n"},
		"trailing block":  {"order 42: shipped\n\n<system-reminder>\n<total_tokens>14999897 tokens left</total_tokens>\n</system-reminder>", "order 42: shipped"},
		"leading block":   {"<system-reminder>note</system-reminder>\nout", "out"},
		"between":         {"a\n<system-reminder>x</system-reminder>\nb", "a\nb"},
		"two blocks":      {"a<system-reminder>x</system-reminder><system-reminder>y</system-reminder>", "a"},
		"only a block":    {"<system-reminder>x</system-reminder>", ""},
		"unterminated":    {"grep found <system-reminder> in file.go", "grep found <system-reminder> in file.go"},
		"closing only":    {"a </system-reminder> b", "a </system-reminder> b"},
		"block then open": {"a<system-reminder>x</system-reminder> b <system-reminder> c", "a\nb <system-reminder> c"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, Strip(tc.in))
		})
	}
}
