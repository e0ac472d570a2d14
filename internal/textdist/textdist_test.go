package textdist_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/internal/textdist"
)

func TestLevenshtein(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"connector", "conector", 1},
		{"kitten", "sitting", 3},
		{"echo", "ecko", 1},
		{"größe", "grösse", 2},
	} {
		assert.Equal(t, tc.want, textdist.Levenshtein(tc.a, tc.b), "%q %q", tc.a, tc.b)
		assert.Equal(t, tc.want, textdist.Levenshtein(tc.b, tc.a), "symmetric: %q %q", tc.b, tc.a)
	}
}
