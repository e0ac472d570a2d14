package docker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// takeoverChat is the chat the takeover helper process works on.
const takeoverChat = "takeover"

// tickScript is the "agent" of the takeover test: it appends to a file in
// the workspace every 50 ms until it is killed.
const tickScript = `while :; do echo tick >> ticks; sleep 0.05; done`

// takeoverProcess is a gateway-like process (helper-process mode of the
// test binary): it starts an executor on $AGENTBOX_TEST_DATA_DIR, creates
// a sandbox for takeoverChat, starts tickScript in it, prints
// "READY <container id> <sandbox id>" once the script writes, and waits to
// be killed. With $AGENTBOX_TEST_POOL_HELPER (a helper binary) it runs a
// pool of one, and the sandbox is a pooled container adopted by the chat.
func takeoverProcess() int {
	ctx := context.Background()
	dataDir := os.Getenv("AGENTBOX_TEST_DATA_DIR")
	o := Options{DataDir: dataDir, Image: testenv.Image(), ReconcileInterval: -1, RetentionInterval: -1}
	if bin := os.Getenv("AGENTBOX_TEST_POOL_HELPER"); bin != "" {
		o.HelperBinary, o.Pool = bin, 1
	}
	e, err := New(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if o.Pool > 0 {
		fill, err := e.Create(ctx, testSpec("fill"))
		if err == nil {
			err = fill.Close(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for e.pool.size() == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	sb, err := e.Create(ctx, testSpec(takeoverChat))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", tickScript}, Timeout: 10 * time.Minute})
		fmt.Fprintln(os.Stderr, "takeover process: the tick script ended:", err)
	}()
	for {
		if fi, err := sb.Stat(ctx, "ticks"); err == nil && fi.Size > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("READY " + sb.ID() + " " + sb.(*Sandbox).sandboxID)
	select {} // until SIGKILL
}

// TestTakeoverAfterKill9: gateway A runs an agent on a chat and is killed
// with SIGKILL; gateway B, already running on the same data dir with its
// reconciler off, gets the same chat. When B's Create returns, A's
// container is gone (the daemon lists only B's container for the chat),
// and nothing writes to the workspace any more: never two containers on
// one workspace, without waiting for a reconcile.
// In the pooled variant A's container was adopted from A's pool: no label
// names the chat, and B finds it by its owner record.
func TestTakeoverAfterKill9(t *testing.T) {
	t.Run("request", func(t *testing.T) { testTakeoverAfterKill9(t, "") })
	t.Run("pooled", func(t *testing.T) { testTakeoverAfterKill9(t, testenv.HelperBinary(t)) })
}

func testTakeoverAfterKill9(t *testing.T, poolHelper string) {
	testenv.RequireImage(t)
	dataDir := t.TempDir()
	t.Cleanup(func() { unmountAll(t, dataDir) })
	// B starts first, so that its startup reconcile cannot be what removes
	// A's container.
	b := newTestExecutor(t, func(o *Options) { o.DataDir = dataDir })

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperProcessEnv+"=takeover", "AGENTBOX_TEST_DATA_DIR="+dataDir, "AGENTBOX_TEST_POOL_HELPER="+poolHelper)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the gateway process did not report its sandbox")
	fields := strings.Fields(line)
	require.Len(t, fields, 3, line)
	require.Equal(t, "READY", fields[0])
	oldID, oldSandbox := fields[1], fields[2]

	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	// The old container, should the takeover fail to remove it.
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), oldID, container.RemoveOptions{Force: true}) })

	wsDir, err := executor.WorkspaceDir(dataDir, "u1", takeoverChat)
	require.NoError(t, err)
	ticks := filepath.Join(wsDir, "ticks")
	size := func() int64 {
		fi, err := os.Stat(ticks)
		require.NoError(t, err)
		return fi.Size()
	}
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no cleanup runs
	_ = cmd.Wait()
	s0 := size()
	if poolHelper == "" {
		// (The helper kills a command whose caller is gone.)
		require.Eventually(t, func() bool { return size() > s0 }, time.Minute, 20*time.Millisecond,
			"the killed gateway's agent keeps writing to the workspace")
	}
	ins, err := cli.ContainerInspect(ctx, oldID)
	require.NoError(t, err, "the killed gateway's container outlives it")
	require.True(t, ins.State.Running)

	sb := create(t, b, testSpec(takeoverChat))

	// At the moment Create returns, the chat has exactly one container
	// (A's pooled one, if any, is A's to lose with its instance).
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelDataDir+"="+dataDir),
	)})
	require.NoError(t, err)
	var ids []string
	for _, c := range list {
		if c.Labels[LabelChat] == takeoverChat || c.ID == oldID {
			ids = append(ids, c.ID)
		}
	}
	assert.Equal(t, []string{sb.ID()}, ids, "containers on the chat when the new Create returned (old one %s)", shortID(oldID))
	if poolHelper != "" {
		// The slot is unmounted; A's pool dir stays mounted until an
		// executor starts on the data dir and finds A dead.
		mounts := mountsUnder(t, filepath.Join(dataDir, poolDir))
		require.Len(t, mounts, 1, "A's pool dir alone: %v", mounts)
		assert.NotEqual(t, oldSandbox, filepath.Base(mounts[0]))
		newTestExecutor(t, func(o *Options) { o.DataDir = dataDir })
		assert.Empty(t, mountsUnder(t, dataDir), "a new executor sweeps a dead instance's pool dir")
	}
	_, err = cli.ContainerInspect(ctx, oldID)
	assert.True(t, cerrdefs.IsNotFound(err), "the old container is gone: %v", err)
	assert.NoDirExists(t, filepath.Join(dataDir, "sandboxes", oldSandbox), "the old sandbox's host dir")

	// Nothing but the new sandbox touches the workspace any more: the
	// count stays put while the new sandbox runs a command that takes
	// longer than several ticks.
	s1 := size()
	mustRun(t, sb, "sleep 0.5")
	assert.Equal(t, s1, size(), "the workspace was written after the takeover")
	assert.Equal(t, fmt.Sprint(s1), mustRun(t, sb, "wc -c < ticks"), "the new sandbox sees the old agent's last write")
}
