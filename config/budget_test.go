package config

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBudgetLoads: sandbox.budget lands in Sandbox.Budget; unset keys stay
// zero, which the gateway reads as its derived default.
func TestBudgetLoads(t *testing.T) {
	root := writeTree(t, with(
		coder("deepseek.v3", `"command": "claude"`, `"budget": {"calls": 30, "tokens": 500000, "wall": "2m"}`),
		coderAs("partial", `"budget": {"tokens": 3000}`),
		coderAs("none", `"timeout": "5m"`)))
	g, err := Load(root, testOptions())
	require.NoError(t, err)
	assert.Equal(t, Budget{Calls: 30, Tokens: 500_000, Wall: 2 * time.Minute}, g.Assistants["coder"].Sandbox.Budget)
	assert.Equal(t, Budget{Tokens: 3000}, g.Assistants["coder_partial"].Sandbox.Budget)
	assert.Zero(t, g.Assistants["coder_none"].Sandbox.Budget)
	b, err := json.Marshal(g.Assistants["coder"].Sandbox)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"budget":{"calls":30,"tokens":500000,"wall":"2m0s"}`)
	assert.NotEqual(t, g.Assistants["coder"].Sandbox.ConfigHash(), g.Assistants["coder_none"].Sandbox.ConfigHash())
}
