package mcphost_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/mcphost"
)

// abxIn runs abx in sb as the agent would, with env added.
func abxIn(t *testing.T, sb executor.Sandbox, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut strings.Builder
	res, err := sb.Exec(context.Background(), &executor.Cmd{Args: append([]string{docker.ContainerToolsPath}, args...), Env: env,
		Stdout: &out, Stderr: &errOut, Timeout: time.Minute})
	require.NoError(t, err)
	return out.String(), errOut.String(), res.ExitCode
}

// TestRefuseAnotherSandboxsTokenInDocker: two real sandboxes, each with
// its own session; a process in B that presents A's token on the socket
// in B's directory is refused, B's own token file gets B's identity, and
// once B's request ended its token is refused as expired.
func TestRefuseAnotherSandboxsTokenInDocker(t *testing.T) {
	img := testenv.RequireImage(t)
	ctx := context.Background()
	e, err := docker.New(ctx, docker.Options{DataDir: t.TempDir(), Image: img, HelperBinary: testenv.HelperBinary(t),
		ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	h, rec, logs := newHost(t, mcphost.Options{})
	open := func(user string) (executor.Sandbox, *mcphost.Session) {
		sb, err := e.Create(ctx, executor.Spec{UserID: user, ChatID: "c1", AssistantID: "coder", MemoryBytes: 256 << 20, CPUs: 1,
			PidsLimit: 128, Timeout: 5 * time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sb.Close(context.Background()) })
		s, err := h.Open(mcphost.OpenOptions{HostDir: sb.HostDir(), UID: executor.DefaultUID, GID: executor.DefaultGID, Sandbox: sb.ID(),
			Grant: mcphost.Grant{Identity: mcphost.Identity{User: user, Chat: "c1", Assistant: "coder"}, Allow: map[string][]string{"gw": {"echo"}}}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return sb, s
	}
	_, a := open("alice")
	sbB, b := open("bob")

	_, stderr, code := abxIn(t, sbB, []string{"AGENTBOX_TOKEN=" + a.Token()}, "call", "gw/echo", "text=hi")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "wrong token for this sandbox")
	assert.Empty(t, rec.all(), "no handler ran")
	assert.Contains(t, logs.String(), "refused an MCP connection")

	stdout, stderr, code := abxIn(t, sbB, nil, "call", "gw/echo", "text=hi")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| user: bob", "B's own token file carries B's identity")

	b.Revoke() // B's request ended
	_, stderr, code = abxIn(t, sbB, []string{"AGENTBOX_TOKEN=" + b.Token()}, "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "the token expired")
	_, stderr, code = abxIn(t, sbB, nil, "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "Error: this sandbox has no gateway tools now: no request token in /run/agentbox/token", "the token file is gone too")
	t.Logf("abx after the request ended, without a token: %s", strings.TrimSpace(stderr))
	require.Len(t, rec.all(), 1)
	assert.Equal(t, "bob", rec.all()[0].Identity.User)
}
