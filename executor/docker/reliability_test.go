package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// helperProcessEnv selects the helper-process mode of the test binary (see
// TestMain): it starts an executor on $AGENTBOX_TEST_DATA_DIR, creates two
// sandboxes, prints their ids and waits to be killed.
const helperProcessEnv = "AGENTBOX_DOCKER_HELPER_PROCESS"

func TestMain(m *testing.M) {
	switch os.Getenv(helperProcessEnv) {
	case "1":
		os.Exit(helperProcess())
	case "takeover":
		os.Exit(takeoverProcess())
	}
	os.Exit(m.Run())
}

func helperProcess() int {
	ctx := context.Background()
	e, err := New(ctx, Options{DataDir: os.Getenv("AGENTBOX_TEST_DATA_DIR"), Image: testenv.Image(), ReconcileInterval: -1, RetentionInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var ids []string
	for _, chat := range []string{"k1", "k2"} {
		sb, err := e.Create(ctx, testSpec(chat))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ids = append(ids, sb.ID(), sb.(*Sandbox).sandboxID)
	}
	fmt.Println("READY " + strings.Join(ids, " "))
	select {} // until SIGKILL
}

// TestReconcileAfterKill9: containers of a manager killed with SIGKILL
// are removed by the next manager's reconciler, with their host dirs, and
// the killed manager's chat locks are free again.
func TestReconcileAfterKill9(t *testing.T) {
	testenv.RequireImage(t)
	dataDir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperProcessEnv+"=1", "AGENTBOX_TEST_DATA_DIR="+dataDir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "helper process did not report its sandboxes")
	fields := strings.Fields(line)
	require.Len(t, fields, 5, line)
	require.Equal(t, "READY", fields[0])
	containers := []string{fields[1], fields[3]}
	sandboxes := []string{fields[2], fields[4]}

	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no cleanup runs
	_ = cmd.Wait()

	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	for _, id := range containers {
		ins, err := cli.ContainerInspect(ctx, id)
		require.NoError(t, err, "the killed manager's container outlives it")
		require.True(t, ins.State.Running)
	}

	e := newTestExecutor(t, func(o *Options) { o.DataDir = dataDir })
	for i, id := range containers {
		_, err := e.api.ContainerInspect(ctx, id)
		assert.True(t, cerrdefs.IsNotFound(err), "container %s removed by New's reconcile: %v", id, err)
		assert.NoDirExists(t, filepath.Join(dataDir, "sandboxes", sandboxes[i]))
	}
	// The killed manager's flocks died with it.
	sb := create(t, e, testSpec("k1"))
	assert.NotEmpty(t, sb.ID())
	removed, err := e.rec.reconcile(ctx)
	require.NoError(t, err)
	assert.Empty(t, removed, "a leased sandbox is never reconciled away")
}

// TestParallelChats: 20 requests on 20 chats at once all succeed.
func TestParallelChats(t *testing.T) {
	e := newTestExecutor(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]string, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			sb, err := e.Create(ctx, testSpec("par-"+strconv.Itoa(i)))
			if err != nil {
				errs[i] = err
				return
			}
			var out strings.Builder
			_, err = sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "echo chat-$N"}, Env: []string{"N=" + strconv.Itoa(i)}, Stdout: &out})
			outs[i] = strings.TrimSpace(out.String())
			errs[i] = errors.Join(err, sb.Close(ctx))
		}()
	}
	wg.Wait()
	for i := range n {
		assert.NoError(t, errs[i], "request %d", i)
		assert.Equal(t, "chat-"+strconv.Itoa(i), outs[i])
	}
	t.Logf("%d parallel create+exec+close on %d chats: %v", n, n, time.Since(start))
}

// TestOneChatSerialized: 10 requests on one chat at once run one at a time
// (overlap 0) and all succeed.
func TestOneChatSerialized(t *testing.T) {
	e := newTestExecutor(t)
	const n = 10
	var active, maxActive atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			spec := testSpec("serial")
			spec.LeaseWait = 3 * time.Minute
			sb, err := e.Create(ctx, spec)
			if err != nil {
				errs[i] = err
				return
			}
			now := active.Add(1)
			for {
				m := maxActive.Load()
				if now <= m || maxActive.CompareAndSwap(m, now) {
					break
				}
			}
			// A read-modify-write that loses updates if two runs overlap.
			_, err = sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", `n=$(cat count 2>/dev/null || echo 0); sleep 0.05; echo $((n+1)) > count`}})
			active.Add(-1)
			errs[i] = errors.Join(err, sb.Close(ctx))
		}()
	}
	wg.Wait()
	for i := range n {
		assert.NoError(t, errs[i], "request %d", i)
	}
	overlap := maxActive.Load() - 1
	assert.Zero(t, overlap, "requests on one chat that overlapped")
	data, err := os.ReadFile(filepath.Join(e.layout.Dir("u1", "serial"), "count"))
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(n), strings.TrimSpace(string(data)), "every run saw the previous one's result")
	t.Logf("%d requests on one chat: overlap %d", n, overlap)
}
