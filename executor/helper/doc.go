// Package helper is agentbox's in-container agent and its host-side client.
//
// The helper is a small static binary (cmd/agentbox-helper: the stdlib, plus
// the official MCP SDK for abx's client) that
// runs as a sandbox container's main process under Docker's Init. The host
// bind-mounts a per-sandbox directory at /run/agentbox (the directory, never
// a socket file, so a restarted host listener is picked up: the helper dials
// host sockets per connection). Through it:
//
//   - exec.sock: the helper listens, the host dials once per command. Each
//     connection carries one exchange chosen by its first frame: hello (the
//     ready signal WaitReady waits for), request (run one command) or kill
//     (cancel a running command by id). Frames are a type byte, a big-endian
//     uint32 length and at most MaxFrame bytes of payload; output travels in
//     32 KiB frames with backpressure, so neither side buffers a command's
//     output. Every command runs in its own process group; timeout, cancel
//     or a vanished host kill the whole group (SIGTERM, SIGKILL after
//     KillGrace), and whatever the command left running in its group is
//     killed when it exits. A fourth exchange, file (frameFS), is the
//     workspace file API (read, write, restore, list, stat, edit) over the
//     helper's Workdir opened as an executor.Workspace, for hosts that
//     share no directory with the sandbox; Client implements executor.FS
//     with it and bounds what it reads back.
//   - --exec-port N (ServeOptions.ExecPort): the same exchanges on
//     127.0.0.1:N, for a host that reaches the sandbox through a port
//     forward (the Kubernetes backend; NewDialClient).
//   - model.sock: the host's model proxy (package executor/modelproxy). The
//     helper listens on 127.0.0.1:<ModelPort> inside the container (network
//     none still has loopback) and relays each TCP connection to it.
//   - egress.sock: the host's egress proxy (package executor/egress), the
//     same relay on 127.0.0.1:<EgressPort>; the agent's HTTP_PROXY and
//     HTTPS_PROXY point there when the assistant has an egress policy.
//   - mcp.sock: the host's MCP endpoint. `agentbox-helper mcp --server <id>`
//     is the stdio MCP server named in .mcp.json; it sends one hello line
//     (MCPHello: version, server id, per-request token taken from
//     AGENTBOX_TOKEN or the file /run/agentbox/token), waits for the host's
//     one-line ack, then relays newline-delimited JSON-RPC, each message
//     capped at MaxMCPLine on both sides.
//   - abx (`agentbox-helper tools`, or the binary called as abx): the
//     agent-facing CLI. It connects to mcp.sock as server "" (every tool
//     granted to the request), speaks MCP through LineTransport, and prints
//     what it listed, described or called for an LLM reader (RunTools).
//
// With a deadline (ServeOptions.Deadline) the helper kills every command and
// exits at it even when the host is gone; as the container's main process
// its exit ends the container, which AutoRemove then deletes.
//
// Host integration (executor/docker): create {data}/sandboxes/{id}/ owned by
// the sandbox uid, mode 0700, and mount it (type bind) at ContainerDir; run
// ServeArgs(bin, ServeOptions{Deadline, ModelPort}) as the container's main
// command with Init on; WaitReady(ctx, hostDir) with ctx cancelled when the
// container stops; Sandbox.Exec is Client.Exec; Close the client before
// removing the container. Host sockets come from ListenHostSocket (owned by
// the sandbox uid, 0600): model.sock served by modelproxy.Proxy, mcp.sock by
// the MCP host (package executor/mcphost: ReadMCPHello, TokenMatches,
// WriteMCPAck, then an MCP server over a LineTransport). The agent CLI gets
// ANTHROPIC_BASE_URL=http://127.0.0.1:<ModelPort> and the per-request token
// (ANTHROPIC_API_KEY, AGENTBOX_TOKEN) in its Exec environment, never in the
// container's, so neither appears in docker inspect.
//
// Concurrency: a Client is safe for concurrent use; each Exec uses its own
// connection and Close ends them all. A Server runs commands concurrently.
// LineReader is not safe for concurrent use. A LineTransport's connection
// takes one reader and concurrent writers.
package helper
