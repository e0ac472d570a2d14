package helper

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

func TestDockerExecThroughHelper(t *testing.T) {
	sb := startSandbox(t, sandboxOpts{})
	var out, errb bytes.Buffer
	res, err := sb.client.Exec(context.Background(), &executor.Cmd{
		Args:  []string{"sh", "-c", "id -u; pwd; cat; echo oops >&2; exit 7"},
		Stdin: strings.NewReader("from host\n"), Stdout: &out, Stderr: &errb,
	})
	require.NoError(t, err)
	assert.Equal(t, 7, res.ExitCode)
	assert.Equal(t, "1000\n/workspace\nfrom host\n", out.String())
	assert.Equal(t, "oops\n", errb.String())
	assert.Equal(t, "helper", res.Path)
}

// TestDockerCancelKillsProcessGroup: `sleep 1000 & sleep 1000; wait`
// cancelled after 100 ms leaves no process of it (checked with ps inside
// the container), nor does a `setsid sleep` that left the group.
func TestDockerCancelKillsProcessGroup(t *testing.T) {
	sb := startSandbox(t, sandboxOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sb.client.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "sleep 1000 & sleep 1000; wait"}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("Exec returned %s after start", time.Since(start))
	ps := sb.dockerExec(t, "ps", "-o", "pid,args")
	assert.NotContains(t, ps, "sleep 1000", "ps inside the container:\n%s", ps)

	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = sb.client.Exec(ctx2, &executor.Cmd{Args: []string{"sh", "-c", "setsid sleep 1001 & sleep 1000; wait"}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	ps = sb.dockerExec(t, "ps", "-o", "pid,args")
	assert.NotContains(t, ps, "sleep 100", "ps inside the container:\n%s", ps)
	// The helper still serves.
	var out bytes.Buffer
	_, err = sb.client.Exec(context.Background(), &executor.Cmd{Args: []string{"echo", "alive"}, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "alive\n", out.String())
}
