package config

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReference keeps REFERENCE.md in step with the option tables; run
// with -update to regenerate it.
func TestReference(t *testing.T) {
	got := reference()
	if *update {
		require.NoError(t, os.WriteFile("REFERENCE.md", []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile("REFERENCE.md")
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "REFERENCE.md is stale: run go test ./config -run TestReference -update")
	for _, o := range sandboxOptions {
		assert.Contains(t, got, "| `"+o.Key+"` |", "every option is documented")
	}
}
