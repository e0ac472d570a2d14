package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckpointsLoad: sandbox.checkpoints is on by default; false turns
// it off; an object bounds it; bad values name the key and the fix.
func TestCheckpointsLoad(t *testing.T) {
	root := writeTree(t, with(
		coder("deepseek.v3", `"command": "claude"`, `"checkpoints": {"max": 20, "max_bytes": "1g"}`),
		coderAs("off", `"checkpoints": false`),
		coderAs("on", `"checkpoints": true`),
		coderAs("default", `"timeout": "5m"`)))
	g, err := Load(root, testOptions())
	require.NoError(t, err)
	assert.Equal(t, Checkpoints{Max: 20, MaxBytes: 1 << 30}, g.Assistants["coder"].Sandbox.Checkpoints)
	assert.Equal(t, Checkpoints{Off: true}, g.Assistants["coder_off"].Sandbox.Checkpoints)
	assert.Zero(t, g.Assistants["coder_on"].Sandbox.Checkpoints)
	assert.Zero(t, g.Assistants["coder_default"].Sandbox.Checkpoints)

	bad := writeTree(t, with(
		coder("deepseek.v3", `"command": "claude"`, `"checkpoints": {"max": 0, "max_bytes": "1m", "keep": 3}`),
		coderAs("string", `"checkpoints": "yes"`)))
	_, err = Load(bad, testOptions())
	require.Error(t, err)
	for _, want := range []string{
		"sandbox.checkpoints.max: 0 is out of range; use a whole number from 1 to 1000",
		`sandbox.checkpoints.max_bytes: "1m" is below the minimum; use at least "16m"; a bound is never unlimited`,
		"sandbox.checkpoints.keep: unknown key",
		"sandbox.checkpoints:",
	} {
		assert.Contains(t, err.Error(), want)
	}
}
