package agentbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/services/mcphost"
)

// TestMCPToolsServes: a run needs the host's session only for tools of a
// server registered on it; MCP tools of other servers (the assistant's own,
// inside the sandbox) and built-in tools do not.
func TestMCPToolsServes(t *testing.T) {
	host := mcphost.New(mcphost.Options{})
	host.MustRegister("orders", mcphost.Tool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, *mcphost.Call) (*mcphost.Result, error) { return &mcphost.Result{Text: "ok"}, nil }})
	tools := agentbox.MCPTools(host)
	for allowed, want := range map[string]bool{
		"mcp__orders__lookup": true,
		"mcp__orders":         true,
		"mcp__github__issues": false,
		"mcp__":               false,
		"Bash":                false,
		"":                    false,
	} {
		assert.Equal(t, want, tools.Serves([]string{"Read", allowed}), allowed)
	}
	assert.False(t, tools.Serves(nil))
}
