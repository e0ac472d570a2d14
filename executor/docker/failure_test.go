package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// assertNothingLeft checks that no sandbox host dir and no container of e
// remain, and that the chat's lease is free again.
func assertNothingLeft(t *testing.T, e *Executor, chat string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.o.DataDir, "sandboxes"))
	require.NoError(t, err)
	assert.Empty(t, entries, "host dirs left behind")
	// A container whose helper exited is being removed by AutoRemove when
	// the cleanup's own removal returns ("already in progress"): allow the
	// daemon one call timeout to finish it.
	assert.Eventually(t, func() bool {
		list, err := e.rec.list(context.Background())
		return err == nil && len(list) == 0
	}, e.o.CallTimeout, 50*time.Millisecond, "containers left behind")
	release, err := e.leases.Acquire(context.Background(), "u1/"+chat, 0)
	require.NoError(t, err, "the lease was released")
	release()
}

func TestCreateFailuresLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	exits := filepath.Join(dir, "exits")
	require.NoError(t, os.WriteFile(exits, []byte("#!/bin/sh\nexit 3\n"), 0o755))
	tests := map[string]struct {
		opts    func(*Options)
		spec    func(*executor.Spec)
		wantErr error
		want    string
	}{
		"missing image": {
			spec: func(s *executor.Spec) { s.Image = "agentbox/does-not-exist:never" },
			want: "build or pull it first",
		},
		"helper exits at once": {
			opts:    func(o *Options) { o.HelperBinary = exits },
			wantErr: executor.ErrNotRunning,
			want:    "stopped before its helper answered",
		},
		"invalid spec": {
			spec:    func(s *executor.Spec) { s.PidsLimit = -1 },
			wantErr: executor.ErrInvalid,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var mut []func(*Options)
			if tc.opts != nil {
				mut = append(mut, tc.opts)
			}
			e := newTestExecutor(t, mut...)
			spec := testSpec("fail")
			if tc.spec != nil {
				tc.spec(&spec)
			}
			start := time.Now()
			_, err := e.Create(context.Background(), spec)
			require.Error(t, err)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, time.Since(start), 15*time.Second, "failure is reported promptly")
			assertNothingLeft(t, e, "fail")
		})
	}
}

func TestNewRejectsMissingHelperBinary(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(notExec, []byte("x"), 0o644))
	for name, path := range map[string]string{"missing": filepath.Join(dir, "nope"), "not executable": notExec, "directory": dir} {
		t.Run(name, func(t *testing.T) {
			_, err := New(context.Background(), Options{DataDir: t.TempDir(), HelperBinary: path})
			assert.ErrorIs(t, err, executor.ErrInvalid)
			assert.Contains(t, err.Error(), "make helper")
		})
	}
}

// TestTwoGatewaysShareDataDir: two executors on one data dir (as two
// gateway processes would be) never share a chat: the flock next to the
// workspace makes the second one wait, then fail with ErrBusy.
func TestTwoGatewaysShareDataDir(t *testing.T) {
	a := newTestExecutor(t)
	b := newTestExecutor(t, func(o *Options) { o.DataDir = a.o.DataDir })
	require.NotEqual(t, a.o.InstanceID, b.o.InstanceID)
	sb := create(t, a, testSpec("shared"))

	spec := testSpec("shared")
	spec.LeaseWait = 300 * time.Millisecond
	start := time.Now()
	_, err := b.Create(context.Background(), spec)
	assert.ErrorIs(t, err, executor.ErrBusy)
	assert.GreaterOrEqual(t, time.Since(start), spec.LeaseWait)
	assert.Contains(t, err.Error(), "another gateway")

	// Neither reconciler touches the other's live sandbox.
	removed, err := b.rec.reconcile(context.Background())
	require.NoError(t, err)
	assert.Empty(t, removed)

	require.NoError(t, sb.Close(context.Background()))
	sb2 := create(t, b, spec)
	assert.NotEmpty(t, sb2.ID())
}

// TestSandboxDeadline: the container ends at its deadline by itself and
// the daemon removes it (AutoRemove); Exec then fails, Close succeeds.
func TestSandboxDeadline(t *testing.T) {
	e := newTestExecutor(t)
	// The deadline must leave time for the container to start on this
	// machine as loaded as it is now: a few times a create measured here.
	t0 := time.Now()
	require.NoError(t, create(t, e, testSpec("deadline-baseline")).Close(context.Background()))
	spec := testSpec("deadline")
	spec.Timeout = max(2*time.Second, 4*time.Since(t0))
	sb := create(t, e, spec)
	require.Eventually(t, func() bool {
		_, err := e.api.ContainerInspect(context.Background(), sb.ID())
		return cerrdefs.IsNotFound(err)
	}, spec.Timeout+30*time.Second, 100*time.Millisecond, "the daemon removed the container at its deadline")
	_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
	assert.Error(t, err)
	assert.True(t, errorsIsAny(err, executor.ErrTimeout, executor.ErrNotRunning), "got %v", err)
	assert.NoError(t, sb.Close(context.Background()), "a container already gone is not a close error")
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// TestCloseDuringCreate: an executor closed while creates are under way
// leaves no container behind and every create either returned a sandbox
// that Close then closed, or an error.
func TestCloseDuringCreate(t *testing.T) {
	img := testenv.RequireImage(t)
	e, err := New(context.Background(), Options{DataDir: t.TempDir(), Image: img, Logger: testLogger(t), ReconcileInterval: -1, RetentionInterval: -1})
	require.NoError(t, err)
	const n = 4
	results := make(chan error, n)
	for i := range n {
		go func() {
			sb, err := e.Create(context.Background(), testSpec(fmt.Sprintf("cdc-%d", i)))
			if err == nil {
				_, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
			}
			results <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, e.Close())
	for range n {
		if err := <-results; err != nil {
			assert.ErrorIs(t, err, executor.ErrNotRunning)
		}
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelDataDir+"="+e.o.DataDir))})
	require.NoError(t, err)
	assert.Empty(t, list, "containers left after Close")
	entries, err := os.ReadDir(filepath.Join(e.o.DataDir, "sandboxes"))
	require.NoError(t, err)
	assert.Empty(t, entries)
	assert.NoFileExists(t, filepath.Join(e.o.DataDir, instanceLockName(e.o.InstanceID)))
}
