package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type closeCounter struct{ n *atomic.Int32 }

func (c closeCounter) Close(context.Context) error { c.n.Add(1); return nil }

// TestRegistryClosesWhatCloseDidNotSee: Close waits for a Create under
// way; the sandbox that Create registers after Shut is closed by Add, the
// ones open before by CloseAll, and nothing starts afterwards.
func TestRegistryClosesWhatCloseDidNotSee(t *testing.T) {
	var closed atomic.Int32
	r := NewRegistry[closeCounter]()
	ctx := context.Background()

	done, err := r.Begin("a")
	require.NoError(t, err)
	require.NoError(t, r.Add(ctx, "a", closeCounter{&closed}))
	done()
	assert.True(t, r.Holds("a"))

	late, err := r.Begin("b")
	require.NoError(t, err)
	assert.True(t, r.Holds("b"), "a sandbox being created is held")

	require.True(t, r.Shut())
	assert.False(t, r.Shut(), "the second Shut reports it was closed already")
	_, err = r.Begin("c")
	assert.ErrorIs(t, err, ErrNotRunning)

	finished := make(chan int)
	go func() {
		n, err := r.CloseAll(ctx)
		assert.NoError(t, err)
		finished <- n
	}()
	// CloseAll waits for b's Create, which finds the registry closed.
	err = r.Add(ctx, "b", closeCounter{&closed})
	assert.ErrorIs(t, err, ErrNotRunning)
	late()
	assert.Equal(t, 1, <-finished, "CloseAll closed the one it saw")
	assert.Equal(t, int32(2), closed.Load(), "and Add closed the one it did not")
	assert.False(t, r.Holds("b"))
}

// TestRegistryForget: a closed sandbox leaves the registry.
func TestRegistryForget(t *testing.T) {
	var closed atomic.Int32
	r := NewRegistry[closeCounter]()
	done, err := r.Begin("a")
	require.NoError(t, err)
	require.NoError(t, r.Add(context.Background(), "a", closeCounter{&closed}))
	done()
	done() // safe twice
	_, ok := r.Get("a")
	assert.True(t, ok)
	r.Forget("a")
	_, ok = r.Get("a")
	assert.False(t, ok)
	assert.Empty(t, r.Open())
	r.Shut()
	n, err := r.CloseAll(context.Background())
	assert.Zero(t, n)
	assert.False(t, errors.Is(err, ErrNotRunning))
}
