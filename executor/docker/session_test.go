package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

func TestSessionSandboxParkAndUnpark(t *testing.T) {
	e := newTestExecutor(t)
	ctx := context.Background()
	spec := testSpec("park")
	spec.IdleTTL = time.Minute
	sb := create(t, e, spec)
	ins, err := e.api.ContainerInspect(ctx, sb.id)
	require.NoError(t, err)
	assert.Equal(t, PolicySession, ins.Config.Labels[LabelPolicy])
	assert.Equal(t, "1m0s", ins.Config.Labels[LabelIdleTTL])

	mustRun(t, sb, "echo kept > /tmp/state")
	require.NoError(t, sb.Park())
	require.NoError(t, sb.Park(), "parking twice is harmless")
	// Parked, the chat is free: the executor's lease and flock are back.
	release, err := e.leases.Acquire(ctx, "u1/park", 0)
	require.NoError(t, err, "a parked sandbox holds no lease")
	release()
	lock, err := e.lockChat(ctx, "u1", "park", 0)
	require.NoError(t, err, "nor the chat's flock")
	require.NoError(t, lock.Close())
	// The reconciler keeps it (still this instance's open sandbox), and
	// retention does not touch its workspace.
	removed, err := e.rec.reconcile(ctx)
	require.NoError(t, err)
	assert.NotContains(t, removed, sb.id)
	_, ok := e.ret.tryLease("u1", "park")
	assert.False(t, ok, "retention skips a chat with a parked container")

	require.NoError(t, sb.Unpark(ctx, time.Second))
	assert.Equal(t, "kept", mustRun(t, sb, "cat /tmp/state"), "the same container continues")
	_, err = e.leases.Acquire(ctx, "u1/park", 0)
	require.ErrorIs(t, err, executor.ErrBusy, "unparked, it holds the chat again")

	// Parked again, a new sandbox on the chat replaces it.
	require.NoError(t, sb.Park())
	sb2 := create(t, e, spec)
	assert.NotEqual(t, sb.id, sb2.id)
	err = sb.Unpark(ctx, 0)
	require.Error(t, err)
	assert.True(t, errors.Is(err, executor.ErrNotRunning), "the replaced sandbox is closed: %v", err)
	list, err := e.chatContainers(ctx, "u1", "park")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, sb2.id, list[0].ID)
}

func TestSessionSandboxTakenOverByAnotherInstance(t *testing.T) {
	e := newTestExecutor(t)
	ctx := context.Background()
	spec := testSpec("steal")
	spec.IdleTTL = time.Minute
	sb := create(t, e, spec)
	require.NoError(t, sb.Park())
	other := newTestExecutor(t, func(o *Options) { o.DataDir = e.o.DataDir })
	sb2 := create(t, other, spec)
	require.NoError(t, sb2.Close(ctx))
	err := sb.Unpark(ctx, time.Second)
	require.ErrorIs(t, err, executor.ErrSandboxGone, "the other instance's takeover removed the parked container")
	rel, err := e.leases.Acquire(ctx, "u1/steal", 0)
	require.NoError(t, err, "a failed unpark leaves the chat released")
	rel()
}
