package helper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// ExampleServeArgs is the container's main command (run it under Init with
// the per-sandbox directory mounted at /run/agentbox).
func ExampleServeArgs() {
	args := helper.ServeArgs("/usr/local/bin/agentbox-helper", helper.ServeOptions{
		Deadline:  time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		ModelPort: 4000,
	})
	fmt.Println(strings.Join(args, " "))
	// Output:
	// /usr/local/bin/agentbox-helper serve --dir /run/agentbox --workdir /workspace --deadline 2026-01-02T15:04:05Z --model-port 4000
}

// ExampleWaitReady waits for a sandbox's helper, then runs a command in it.
func ExampleWaitReady() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hostDir := "/var/lib/agentbox/sandboxes/abc123" // mounted at /run/agentbox
	c, err := helper.WaitReady(ctx, hostDir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Close() }()
	res, err := c.Exec(ctx, &executor.Cmd{
		Args:   []string{"sh", "-c", "ls -la"},
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	fmt.Println(res.ExitCode, err)
}

// ExampleReadMCPHello is a host MCP endpoint on mcp.sock and the relay that
// `agentbox-helper mcp --server demo` runs in the container.
func ExampleReadMCPHello() {
	dir, _ := os.MkdirTemp("", "sandbox")
	defer func() { _ = os.RemoveAll(dir) }()
	ln, err := helper.ListenHostSocket(dir, helper.MCPSocket, -1, -1) // a real host passes the sandbox uid:gid
	if err != nil {
		panic(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		lr := helper.NewLineReader(conn, helper.MaxMCPLine)
		h, err := helper.ReadMCPHello(lr)
		if err != nil || !h.TokenMatches("per-request-token") {
			_ = helper.WriteMCPAck(conn, errors.New("unknown token"))
			return
		}
		_ = helper.WriteMCPAck(conn, nil)
		for {
			line, err := lr.ReadLine()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(conn, `{"jsonrpc":"2.0","id":1,"result":{"server":%q,"echo":%s}}`+"\n", h.Server, line)
		}
	}()

	err = helper.RunMCPRelay(context.Background(), helper.MCPRelayOptions{
		Dir: dir, Server: "demo", Token: "per-request-token",
		Stdin:  strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}` + "\n"),
		Stdout: os.Stdout,
	})
	fmt.Println(err)
	// Output:
	// {"jsonrpc":"2.0","id":1,"result":{"server":"demo","echo":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}}
	// <nil>
}
