package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCodexAssistant loads a codex assistant on each connector type and
// refuses, naming the key and what to do, the settings the Codex CLI has
// no equivalent for.
func TestCodexAssistant(t *testing.T) {
	tree := func(conn, sandbox string) map[string]string {
		return map[string]string{"connectors/c.conn.yao": conn,
			"assistants/coder/package.yao": `{"name": "Coder", "connector": "c", "sandbox": {"command": "codex"` + sandbox + `}}`}
	}
	const openai = `{"type": "openai", "options": {"model": "gpt-5.5", "key": "k", "api": "responses"}}`
	const anthropic = `{"type": "anthropic", "options": {"model": "claude-sonnet-4-5", "key": "k"}}`
	const cursor = `{"type": "cursor", "options": {"model": "auto", "key": "k"}}`

	g, err := Load(writeTree(t, tree(openai, `, "arguments": {"max_retries": 1}`)), testOptions())
	require.NoError(t, err)
	sb := g.Assistants["coder"].Sandbox
	assert.Equal(t, CommandCodex, sb.Command)
	assert.Equal(t, "agentbox/sandbox-codex:latest", sb.Image)
	assert.Equal(t, "none", sb.Network, "the model is reached through the proxy")

	g, err = Load(writeTree(t, tree(anthropic, `, "arguments": {"model_profile": "gpt-5.5", "context_window": 200000}`)), testOptions())
	require.NoError(t, err)
	assert.Equal(t, "gpt-5.5", g.Assistants["coder"].Sandbox.Arguments["model_profile"])

	for name, tc := range map[string]struct{ conn, sandbox, want string }{
		"cursor connector":  {cursor, "", `connector "c" is of type "cursor", which codex cannot use`},
		"max_turns":         {openai, `, "arguments": {"max_turns": 5}`, "sandbox.budget"},
		"permission_mode":   {openai, `, "arguments": {"permission_mode": "plan"}`, "the container is the boundary"},
		"model":             {openai, `, "arguments": {"model": "x"}`, "model_profile"},
		"unknown argument":  {openai, `, "arguments": {"fast": true}`, "sandbox.arguments.fast"},
		"window too small":  {openai, `, "arguments": {"context_window": 100}`, "context_window"},
		"retries too many":  {openai, `, "arguments": {"max_retries": 9}`, "max_retries"},
		"profile not text":  {openai, `, "arguments": {"model_profile": 5}`, "model_profile"},
		"sessions not bool": {openai, `, "arguments": {"sessions": "no"}`, "sessions"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeTree(t, tree(tc.conn, tc.sandbox)), testOptions())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
