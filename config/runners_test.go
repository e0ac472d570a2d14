package config

import (
	"testing"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestArgumentsAcceptedByRunners checks that what config accepts as
// arguments, the runners accept too: the schema table and the runners'
// own checks must not drift apart.
func TestArgumentsAcceptedByRunners(t *testing.T) {
	cases := map[string]struct {
		files map[string]string
		id    string
	}{
		"claude every argument": {id: "coder", files: with(coder("deepseek.v3", `"command": "claude"`,
			`"arguments": {"max_turns": 1000, "max_retries": 5, "permission_mode": "dontAsk", "allowed_tools": ["Read", "Bash(git:*)"], "disallowed_tools": ["WebFetch"]}`))},
		"claude lower bounds": {id: "coder", files: with(coder("deepseek.v3", `"command": "claude"`,
			`"arguments": {"max_turns": 1, "max_retries": 0, "permission_mode": "plan", "allowed_tools": []}`))},
		"claude no arguments": {id: "coder", files: with(coder("deepseek.v3", `"command": "claude"`))},
		"cursor every argument": {id: "coder", files: with(coder("cursor", `"command": "cursor"`, `"network": "bridge"`,
			`"arguments": {"model": "gpt-5", "force": false}`))},
		"cursor no arguments": {id: "coder", files: with(coder("cursor", `"command": "cursor"`, `"network": "bridge"`))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a, err := LoadAssistant(writeTree(t, tc.files), tc.id, testOptions())
			require.NoError(t, err)
			require.NotNil(t, a.Sandbox)
			switch a.Sandbox.Command {
			case CommandClaude:
				_, err = claude.ParseArguments(a.Sandbox.Arguments)
			case CommandCursor:
				_, err = cursor.New().Invocation(executor.RunRequest{
					Messages:  []executor.Message{{Role: "user", Content: "hi"}},
					Model:     a.Connector.Model,
					APIKey:    a.Connector.Key.Reveal(),
					Arguments: a.Sandbox.Arguments,
					Workdir:   executor.ContainerWorkdir,
					Home:      "/tmp/home",
				})
			}
			assert.NoError(t, err)
		})
	}
}
