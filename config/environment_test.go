package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEnvironmentPromptLoads: sandbox.environment_prompt false opts out,
// true and unset keep the summary, anything else is an error.
func TestEnvironmentPromptLoads(t *testing.T) {
	root := writeTree(t, with(
		coder("deepseek.v3", `"command": "claude"`, `"environment_prompt": false`),
		coderAs("on", `"environment_prompt": true`),
		coderAs("unset", `"timeout": "5m"`)))
	g, err := Load(root, testOptions())
	require.NoError(t, err)
	assert.True(t, g.Assistants["coder"].Sandbox.OmitEnvironmentPrompt)
	assert.False(t, g.Assistants["coder_on"].Sandbox.OmitEnvironmentPrompt)
	assert.False(t, g.Assistants["coder_unset"].Sandbox.OmitEnvironmentPrompt)
	assert.NotEqual(t, g.Assistants["coder"].Sandbox.ConfigHash(), g.Assistants["coder_on"].Sandbox.ConfigHash())

	_, err = Load(writeTree(t, coder("deepseek.v3", `"command": "claude"`, `"environment_prompt": "no"`)), testOptions())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sandbox.environment_prompt")
}
