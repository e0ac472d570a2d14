package mcphost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/services/mcphost"
)

// A gateway registers its tools once, then opens a Session per sandboxed
// request on the sandbox's host directory; inside the container, `abx`
// (here helper.RunTools on the same directory) and the agent CLI's MCP
// relay reach it. The handler learns who called from the Grant.
func ExampleHost() {
	host := mcphost.New(mcphost.Options{})
	host.MustRegister("orders", mcphost.Tool{
		Name:        "lookup",
		Description: "Looks up one of the user's orders.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order":{"type":"string"}},"required":["order"]}`),
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			var a struct{ Order string }
			if err := json.Unmarshal(call.Arguments, &a); err != nil {
				return nil, err
			}
			return &mcphost.Result{Text: fmt.Sprintf("order %s of %s: shipped", a.Order, call.Identity.User)}, nil
		},
	})

	dir, _ := os.MkdirTemp("", "sandbox")
	defer func() { _ = os.RemoveAll(dir) }()
	s, err := host.Open(mcphost.OpenOptions{
		HostDir: dir, UID: -1, GID: -1, Sandbox: "sb-1",
		Grant: mcphost.Grant{
			Identity: mcphost.Identity{User: "alice", Chat: "c1", Assistant: "coder"},
			Allow:    mcphost.AllowFromTools([]string{"Bash", "mcp__orders__lookup"}),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Close() }()

	at := time.Date(2026, 11, 22, 18, 30, 0, 0, time.UTC)
	helper.RunTools(context.Background(), []string{"call", "orders/lookup", "order=42"}, os.Stdout, os.Stdout,
		helper.ToolsOptions{Dir: dir, Now: func() time.Time { return at }, Location: time.UTC})
	// Output:
	// Called mcp__orders__lookup
	//   Server: orders
	//   Tool: lookup
	//   Arguments: {"order":"42"}
	//   Time: Sun 2026-11-22 18:30:00 (UTC)
	//   UTC: 2026-11-22T18:30:00Z
	//   Duration: 0s
	//   Status: ok
	//   Result lines: 1
	//   | order 42 of alice: shipped
}
