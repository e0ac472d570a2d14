package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/services/mcphost"
)

// registerTools adds the example gateway's own tools, served to the
// sandboxes of assistants that list them in mcp.servers (server id
// "gateway", see examples/assistants/coder/mcps/gateway.mcp.yao).
func registerTools(h *mcphost.Host) error {
	return h.Register("gateway", mcphost.Tool{
		Name:        "whoami",
		Description: "Tells who the current request runs for (user, chat, assistant) and the gateway's time.",
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			now := time.Now()
			return &mcphost.Result{Text: fmt.Sprintf("user: %s\nchat: %s\nassistant: %s\ntime: %s\nutc: %s",
				call.Identity.User, call.Identity.Chat, call.Identity.Assistant,
				now.Format("Mon 2006-01-02 15:04:05 MST"), now.UTC().Format(time.RFC3339))}, nil
		},
	})
}
