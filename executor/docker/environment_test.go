package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// TestEnvironmentSnapshot: the snapshot reports what a command in a real
// sandbox of the same image sees, is taken once per image and options,
// leaves no container behind, and is taken again when the image under the
// same name changes.
func TestEnvironmentSnapshot(t *testing.T) {
	e := newTestExecutor(t)
	ctx := context.Background()
	before := managedContainers(t, e)
	spec := testSpec("env")
	env, err := e.Environment(ctx, spec)
	require.NoError(t, err)
	t.Logf("summary:\n%s", env.Summary())

	sb := create(t, e, spec)
	seen := strings.Split(mustRun(t, sb, `uname -r; claude --version | head -n 1; uname -m`), "\n")
	require.Len(t, seen, 3)
	assert.NotEmpty(t, env.OS)
	assert.Equal(t, seen[0], env.Kernel)
	assert.Equal(t, seen[1], env.Tools["claude"], "the CLI's version as the agent sees it")
	assert.Equal(t, seen[2], env.Arch)
	assert.Equal(t, e.o.Image, env.Image)
	assert.True(t, strings.HasPrefix(env.ImageID, "sha256:"), env.ImageID)
	assert.Contains(t, env.Limits, "memory 256.0 MiB (no swap), 1 CPUs, 128 processes")
	assert.Equal(t, "none (the model through the gateway)", env.Network)
	assert.Contains(t, env.Mode, "Docker container (runc)")

	again, err := e.Environment(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, env.CapturedAt, again.CapturedAt, "one snapshot per image and options")
	spec.PidsLimit = 100
	other, err := e.Environment(ctx, spec)
	require.NoError(t, err)
	assert.NotEqual(t, env.CapturedAt, other.CapturedAt, "other limits, another snapshot")
	assert.Contains(t, other.Limits, "100 processes")
	require.NoError(t, sb.Close(ctx))
	assert.Equal(t, before, managedContainers(t, e), "the snapshot containers are gone")

	// A new image under the same name: a new snapshot with its tools.
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	tag := "agentbox-envtest:" + strings.ToLower(randomID())
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true}) })
	commitWith(t, cli, e.o.Image, tag, "ripgrep 91.0.1")
	spec.Image = tag
	first, err := e.Environment(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, "ripgrep 91.0.1", first.Tools["rg"])
	commitWith(t, cli, e.o.Image, tag, "ripgrep 92.0.0")
	second, err := e.Environment(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, "ripgrep 92.0.0", second.Tools["rg"], "the rebuilt image is snapshotted again")
	assert.NotEqual(t, first.ImageID, second.ImageID)

	_, err = e.Environment(ctx, executor.Spec{Image: "agentbox-envtest:absent"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not on the daemon; build or pull it first")
}

// commitWith tags, as tag, base with an rg on PATH that prints version.
func commitWith(t *testing.T, cli *client.Client, base, tag, version string) {
	t.Helper()
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: base, User: "0:0", Entrypoint: []string{},
		Cmd: []string{"/bin/sh", "-c", "printf '#!/bin/sh\\necho \"" + version + "\"\\n' > /usr/local/bin/rg && chmod 755 /usr/local/bin/rg"},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	require.NoError(t, err)
	defer func() { _ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) }()
	require.NoError(t, cli.ContainerStart(ctx, c.ID, container.StartOptions{}))
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	okC, errC := cli.ContainerWait(waitCtx, c.ID, container.WaitConditionNotRunning)
	select {
	case res := <-okC:
		require.Equal(t, int64(0), res.StatusCode)
	case err := <-errC:
		require.NoError(t, err)
	}
	_, err = cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: tag})
	require.NoError(t, err)
}

// managedContainers counts the containers of e's data dir (only what this
// test created: the daemon is shared).
func managedContainers(t *testing.T, e *Executor) int {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelDataDir+"="+e.o.DataDir))})
	require.NoError(t, err)
	return len(list)
}
