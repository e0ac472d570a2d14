// Package agentbox puts coding agents in sandboxes behind an LLM gateway.
//
// A gateway adds one middleware to its handler chain. Assistants opt in
// with a sandbox block in their package config; for them, a chat request
// is answered by a real agent CLI (Claude Code; Cursor's as the second
// runner) in a disposable sandbox over the chat's persistent workspace,
// shaped by the assistant's JavaScript Create and Next hooks, and the
// gateway gets back an ordinary completion with usage. Every other request
// reaches the gateway's own handler untouched.
//
// New wires the whole stack from a gateway directory (assistants/ and
// connectors/): the sandbox backend (Options.Backend: Docker by default,
// local bubblewrap, Kubernetes pods, or any executor), the model route
// that keeps connector keys on the host, the egress proxy, the gateway's
// own tools, the runners, hooks, sessions and admission control, and the
// OpenAI-compatible HTTP adapter. Stack.Middleware mounts it in front of
// the gateway's handler:
//
//	ab, err := agentbox.New(ctx, agentbox.Options{Dir: "gateway-dir", DataDir: "/var/lib/agentbox"})
//	if err != nil {
//		log.Fatal(err) // names what to fix
//	}
//	defer ab.Close()
//	http.ListenAndServe(addr, ab.Middleware(yourMux))
//
// examples/mount is that program; examples/gateway is a whole gateway with
// the offline demo. The packages below are for gateways that wire the
// parts themselves: middleware (the gateway-neutral core),
// middleware/openai (the HTTP adapter), executor and its backends,
// services (the host-side model proxy, egress proxy and MCP host), config,
// hooks and jsapi, claude and cursor.
//
// A Stack is safe for concurrent use; Close it once.
package agentbox
