package executor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeases(t *testing.T) {
	l := NewLeases()
	ctx := context.Background()
	rel, err := l.Acquire(ctx, "u/c", 0)
	require.NoError(t, err)
	_, err = l.Acquire(ctx, "u/c", 0)
	assert.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), "another request is using this chat")
	start := time.Now()
	_, err = l.Acquire(ctx, "u/c", 50*time.Millisecond)
	assert.ErrorIs(t, err, ErrBusy)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	other, err := l.Acquire(ctx, "u/other", 0)
	require.NoError(t, err, "another chat is independent")
	other()

	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(ctx, "u/c", 10*time.Second)
		if err == nil {
			r()
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	rel()
	rel() // idempotent
	require.NoError(t, <-got, "a waiter gets the chat when it is released")
	l.mu.Lock()
	assert.Empty(t, l.m, "no entries left behind")
	l.mu.Unlock()

	cctx, cancel := context.WithCancel(ctx)
	hold, err := l.Acquire(ctx, "u/c", 0)
	require.NoError(t, err)
	cancel()
	_, err = l.Acquire(cctx, "u/c", time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	hold()
}
