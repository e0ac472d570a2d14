package helper_test

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/helper"
)

// TestMCPRelayReturnsWhileStdinStaysOpen: the agent CLI keeps the MCP
// server's stdin open at its exit and sends SIGINT (the relay's ctx ends),
// then SIGTERM and SIGKILL; a relay that waited for stdin to end held
// every run about half a second. It must return when ctx ends, and when
// the host hangs up, with stdin still open.
func TestMCPRelayReturnsWhileStdinStaysOpen(t *testing.T) {
	for _, end := range []string{"ctx", "host"} {
		t.Run(end, func(t *testing.T) {
			dir := t.TempDir()
			ln, err := helper.ListenHostSocket(dir, helper.MCPSocket, -1, -1)
			require.NoError(t, err)
			defer func() { _ = ln.Close() }()
			hangUp := make(chan struct{})
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer func() { _ = conn.Close() }()
				lr := helper.NewLineReader(conn, helper.MaxMCPLine)
				if _, err := helper.ReadMCPHello(lr); err != nil {
					return
				}
				_ = helper.WriteMCPAck(conn, nil)
				if _, err := lr.ReadLine(); err != nil {
					return
				}
				_, _ = io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
				<-hangUp
			}()

			stdinR, stdinW := io.Pipe() // never closed: the CLI's open pipe
			defer func() { _ = stdinW.Close() }()
			stdoutR, stdoutW := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- helper.RunMCPRelay(ctx, helper.MCPRelayOptions{Dir: dir, Server: "s", Token: "t", Stdin: stdinR, Stdout: stdoutW})
			}()
			_, err = io.WriteString(stdinW, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`+"\n")
			require.NoError(t, err)
			line, err := bufio.NewReader(stdoutR).ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, line, `"result"`, "the relay works before it is ended")

			if end == "ctx" {
				cancel()
			} else {
				close(hangUp)
			}
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Fatal("the relay still runs with its stdin open after " + end + " ended it")
			}
		})
	}
}
