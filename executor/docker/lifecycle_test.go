package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func TestLifecycle(t *testing.T) {
	e := newTestExecutor(t)
	ctx := context.Background()

	sb := create(t, e, testSpec("life"))
	assert.Equal(t, executor.ContainerWorkdir, sb.Workdir())
	assert.Equal(t, filepath.Join(e.o.DataDir, "sandboxes", sb.sandboxID), sb.HostDir())
	assert.DirExists(t, sb.HostDir())

	assert.Equal(t, executor.DefaultUser+" /workspace", mustRun(t, sb, `echo "$(id -u):$(id -g) $(pwd)"`))
	require.NoError(t, sb.WriteFile(ctx, "notes/hello.txt", []byte("from the host\n")))
	assert.Equal(t, "from the host", mustRun(t, sb, "cat notes/hello.txt"))
	mustRun(t, sb, "echo from the container > made-inside.txt")
	got, err := sb.ReadFile(ctx, "/workspace/made-inside.txt")
	require.NoError(t, err)
	assert.Equal(t, "from the container\n", string(got))

	hostDir := sb.HostDir()
	id := sb.ID()
	require.NoError(t, sb.Close(ctx))
	require.NoError(t, sb.Close(ctx), "Close is idempotent")
	assert.NoDirExists(t, hostDir)
	_, err = e.api.ContainerInspect(ctx, id)
	assert.True(t, err != nil, "container %s must be gone", id)
	_, err = sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrNotRunning)

	// The next request of the chat sees the files.
	ws := e.layout.Dir("u1", "life")
	assert.FileExists(t, filepath.Join(ws, "made-inside.txt"))
	sb2 := create(t, e, testSpec("life"))
	assert.Equal(t, "from the host\nfrom the container", mustRun(t, sb2, "cat notes/hello.txt made-inside.txt"))
	fi, err := os.Stat(filepath.Join(ws, "notes", "hello.txt"))
	require.NoError(t, err)
	assert.NotNil(t, fi)
}

// TestConformance runs the executor conformance suite against real
// containers, on both exec paths.
func TestConformance(t *testing.T) {
	img := testenv.RequireImage(t)
	spec := executor.Spec{Image: img, MemoryBytes: 256 << 20, CPUs: 1, PidsLimit: 128, Timeout: 5 * time.Minute}
	t.Run(PathDockerExec, func(t *testing.T) {
		executortest.RunConformance(t, func(t *testing.T) executor.Executor { return newTestExecutor(t) }, spec)
	})
	t.Run(PathHelper, func(t *testing.T) {
		bin := testenv.HelperBinary(t)
		executortest.RunConformance(t, func(t *testing.T) executor.Executor {
			return newTestExecutor(t, func(o *Options) { o.HelperBinary = bin })
		}, spec)
	})
}
