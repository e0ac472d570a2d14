package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
)

// longCommand runs for two minutes, one second at a time.
const longCommand = "i=0; while [ $i -lt 120 ]; do sleep 1; i=$((i+1)); done"

// TestFaultContainerRemovedMidRun removes the sandbox's container (as an
// operator's `docker rm -f` would) while the agent runs a long command:
// the client gets an error that names what happened, nothing is left
// running, and the next request on the same chat works over the same
// workspace.
func TestFaultContainerRemovedMidRun(t *testing.T) {
	g, data := startGateway(t)
	// The first agent call (it offers Bash) runs a long command; any other
	// call the CLI makes (2.1.330 makes some without tools) and the later
	// turns get the usual script. A queued turn could be taken by such a
	// side call, and then the run would end before the removal.
	var slept atomic.Bool
	g.Model.SetScript(func(r *scriptedapi.Request) scriptedapi.Turn {
		if slices.Contains(r.ToolNames(), "Bash") && slept.CompareAndSwap(false, true) {
			// Not a plain `sleep 120`: Claude Code 2.1.330 refuses a
			// command that starts with a long sleep, and the run would end
			// before the removal.
			return scriptedapi.Call("Bash", map[string]string{"command": longCommand, "description": "wait"})
		}
		return offlineScript(r)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a backstop, not the assertion
	defer cancel()
	const chat = "fault-removed"
	toolUse := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := chatRequest(ctx, newClient(g.URL, demoUser, chat), chat, demoPrompt, func(ext extension, _ string) {
			if ext.Kind == "tool_use" {
				select {
				case toolUse <- struct{}{}:
				default:
				}
			}
		})
		done <- err
	}()
	select {
	case <-toolUse:
	case err := <-done:
		t.Fatalf("the request ended before the agent ran its command: %v", err)
	}
	ids := managedContainers(t, data)
	require.Len(t, ids, 1)
	// The command runs in the container before it goes.
	require.Eventually(t, func() bool {
		out, _ := exec.Command("docker", "top", ids[0]).CombinedOutput()
		return strings.Contains(string(out), "sleep 1")
	}, time.Minute, 100*time.Millisecond, "the agent's command runs")
	out, err := exec.Command("docker", "rm", "-f", ids[0]).CombinedOutput()
	require.NoError(t, err, "%s", out)

	err = <-done
	require.Error(t, err)
	assert.Contains(t, err.Error(), "container went away", "the client is told what happened")
	assert.NotContains(t, err.Error(), data, "no host paths reach the client")
	assert.Empty(t, managedContainers(t, data))

	res, err := demoRequest(ctx, g.URL, chat, demoPrompt, func(extension, string) {})
	require.NoError(t, err, "the next request on the chat works")
	assert.True(t, strings.Contains(res.Content, strings.TrimSpace(scriptedapi.DemoContent)), "%q", res.Content)
	wsDir, err := executor.WorkspaceDir(data, demoUser, chat)
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(wsDir, scriptedapi.DemoFile))
}
