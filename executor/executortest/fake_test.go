package executortest_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
)

func TestFakeSandboxUnscriptedExecFails(t *testing.T) {
	sb := executortest.NewSandbox(t)
	_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no ExecFunc scripted")
	assert.Len(t, sb.Calls(), 1, "the call is still recorded")
}

func TestFakeSandboxRecordsCalls(t *testing.T) {
	sb := executortest.NewSandbox(t)
	var seen []string
	sb.ExecFunc = func(_ context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
		in := new(bytes.Buffer)
		_, _ = in.ReadFrom(cmd.Stdin)
		seen = append(seen, in.String())
		return executor.ExecResult{ExitCode: 3}, nil
	}
	res, err := sb.Exec(context.Background(), &executor.Cmd{
		Args: []string{"claude", "-p"}, Env: []string{"A=1"}, Dir: "/workspace/x",
		Stdin: strings.NewReader("prompt"), Timeout: time.Second, MaxOutput: 10,
	})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, []string{"prompt"}, seen, "the ExecFunc still gets stdin")
	assert.Equal(t, []executortest.ExecCall{{
		Args: []string{"claude", "-p"}, Env: []string{"A=1"}, Dir: "/workspace/x",
		Stdin: []byte("prompt"), Timeout: time.Second, MaxOutput: 10,
	}}, sb.Calls())
}

func TestFakeSandboxConcurrentExec(t *testing.T) {
	sb := executortest.NewSandbox(t)
	sb.ExecFunc = func(context.Context, *executor.Cmd) (executor.ExecResult, error) { return executor.ExecResult{}, nil }
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"x"}})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Len(t, sb.Calls(), 20)
}

func TestFakeSandboxClose(t *testing.T) {
	ctx := context.Background()
	sb := executortest.NewSandbox(t)
	require.NoError(t, sb.WriteFile(ctx, "a", []byte("x")))
	require.NoError(t, sb.Close(ctx))
	require.NoError(t, sb.Close(ctx), "Close is idempotent")
	assert.True(t, sb.Closed())
	_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	_, err = sb.ReadFile(ctx, "a")
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	assert.ErrorIs(t, sb.WriteFile(ctx, "a", nil), executor.ErrNotRunning)
	_, err = sb.ListDir(ctx, "")
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	_, err = sb.Stat(ctx, "a")
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	_, err = sb.EditFile(ctx, "a", nil)
	assert.ErrorIs(t, err, executor.ErrNotRunning)
}

func TestFakeExecutorLease(t *testing.T) {
	ctx := context.Background()
	e := executortest.NewExecutor(t)
	spec := executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 50 * time.Millisecond}
	first, err := e.Create(ctx, spec)
	require.NoError(t, err)

	start := time.Now()
	_, err = e.Create(ctx, spec)
	require.ErrorIs(t, err, executor.ErrBusy)
	assert.GreaterOrEqual(t, time.Since(start), spec.LeaseWait, "waits LeaseWait before giving up")

	other, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "other"})
	require.NoError(t, err, "another chat is not blocked")
	require.NoError(t, other.Close(ctx))

	// A waiter gets the lease as soon as the holder closes.
	spec.LeaseWait = 5 * time.Second
	go func() { time.Sleep(20 * time.Millisecond); _ = first.Close(ctx) }()
	second, err := e.Create(ctx, spec)
	require.NoError(t, err)
	require.NoError(t, second.Close(ctx))
	assert.Len(t, e.Sandboxes(), 3)
}

func TestFakeExecutorRejectsBadIDs(t *testing.T) {
	e := executortest.NewExecutor(t)
	_, err := e.Create(context.Background(), executor.Spec{UserID: "../x", ChatID: "c"})
	assert.ErrorIs(t, err, executor.ErrInvalid)
}

func TestFakeExecutorCloseClosesSandboxes(t *testing.T) {
	e := &executortest.FakeExecutor{DataDir: t.TempDir()}
	sb, err := e.Create(context.Background(), executor.Spec{UserID: "u", ChatID: "c"})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	_, err = sb.ReadFile(context.Background(), "x")
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	_, err = e.Create(context.Background(), executor.Spec{UserID: "u", ChatID: "d"})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
}

func TestHostExec(t *testing.T) {
	ctx := context.Background()
	sb := executortest.NewSandbox(t)
	sb.ExecFunc = sb.HostExec
	var out, errOut bytes.Buffer
	res, err := sb.Exec(ctx, &executor.Cmd{
		Args: []string{"sh", "-c", "pwd; cat; echo $FOO >&2; exit 7"}, Env: []string{"FOO=bar"},
		Stdin: strings.NewReader("in\n"), Stdout: &out, Stderr: &errOut,
	})
	require.NoError(t, err)
	assert.Equal(t, 7, res.ExitCode)
	assert.Equal(t, sb.Dir()+"\nin\n", out.String())
	assert.Equal(t, "bar\n", errOut.String())

	start := time.Now()
	_, err = sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "sleep 30 & sleep 30"}, Timeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, executor.ErrTimeout)
	assert.Less(t, time.Since(start), 5*time.Second)

	_, err = sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "yes"}, MaxOutput: 1000})
	require.ErrorIs(t, err, executor.ErrOutputTooLarge)

	_, err = sb.Exec(ctx, &executor.Cmd{Args: []string{"pwd"}, Dir: "/etc"})
	require.ErrorIs(t, err, executor.ErrInvalid)
}
