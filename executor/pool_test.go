package executor

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPool is a Pool of numbered sandboxes whose starts fail while fail
// is set.
type testPool struct {
	mu      sync.Mutex
	next    int
	fail    error
	dropped map[int]string
	failed  []bool // off, per failure reported
	*Pool[string, int]
}

func newTestPool(size int, idle time.Duration) *testPool {
	tp := &testPool{dropped: map[int]string{}}
	tp.Pool = NewPool(PoolConfig[string, int]{Size: size, Idle: idle,
		Start: func(string, string) (int, error) {
			tp.mu.Lock()
			defer tp.mu.Unlock()
			tp.next++
			return tp.next, tp.fail
		},
		Drop: func(sb int, why string) {
			tp.mu.Lock()
			defer tp.mu.Unlock()
			tp.dropped[sb] = why
		},
		Failed: func(_ error, off bool) {
			tp.mu.Lock()
			defer tp.mu.Unlock()
			tp.failed = append(tp.failed, off)
		},
	})
	return tp
}

// TestPoolBookkeeping: Refill fills a key up to Size, Take hands out the
// newest and only of its key, Expire and Close drop what is left.
func TestPoolBookkeeping(t *testing.T) {
	tp := newTestPool(2, time.Hour)
	tp.Refill("a", "plan")
	tp.Refill("a", "plan") // no more than Size, fills under way counted
	tp.Wait()
	assert.Equal(t, 2, tp.Size())
	_, ok := tp.Take("b")
	assert.False(t, ok, "another configuration's")
	sb, ok := tp.Take("a")
	require.True(t, ok)
	assert.Equal(t, 2, sb, "the newest")
	tp.Refill("a", "plan")
	tp.Wait()
	assert.ElementsMatch(t, []int{1, 3}, tp.Ready())
	tp.Close()
	assert.Equal(t, map[int]string{1: "the executor is closing", 3: "the executor is closing"}, tp.dropped)
	tp.Refill("a", "plan")
	tp.Wait()
	assert.Zero(t, tp.Size(), "a closed pool does not fill")
}

// TestPoolExpires: a sandbox unused for Idle is dropped, by Expire or when
// Take meets it.
func TestPoolExpires(t *testing.T) {
	tp := newTestPool(1, time.Nanosecond)
	tp.Refill("a", "plan")
	tp.Wait()
	tp.Expire()
	assert.Equal(t, "unused for PoolIdle", tp.dropped[1])
	tp.Refill("a", "plan")
	tp.Wait()
	_, ok := tp.Take("a")
	assert.False(t, ok)
	assert.Eventually(t, func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return tp.dropped[2] == "expired"
	}, time.Minute, time.Millisecond)
}

// TestPoolTurnsOff: after PoolMaxFailures failed fills in a row the pool
// stops filling, and says so once; a backend closing is no failure.
func TestPoolTurnsOff(t *testing.T) {
	tp := newTestPool(1, time.Hour)
	tp.fail = fmt.Errorf("closing: %w", ErrNotRunning)
	tp.Refill("a", "plan")
	tp.Wait()
	assert.Empty(t, tp.failed, "a closing backend is no failure")
	tp.fail = fmt.Errorf("the chat is in use: %w", ErrBusy)
	for range PoolMaxFailures {
		tp.Refill("a", "plan")
		tp.Wait()
	}
	assert.Empty(t, tp.failed, "a skipped fill is no failure")
	assert.False(t, tp.Off())
	tp.fail = errors.New("no room")
	for range PoolMaxFailures + 2 {
		tp.Refill("a", "plan")
		tp.Wait()
	}
	assert.True(t, tp.Off())
	assert.Equal(t, []bool{false, false, true}, tp.failed)
	assert.Equal(t, 1+2*PoolMaxFailures, tp.next, "no start after it turned off")
}

// TestPoolTotal: Total bounds the sandboxes of all keys together, and a
// key without sandboxes is forgotten (keys may be one per chat).
func TestPoolTotal(t *testing.T) {
	tp := newTestPool(1, time.Hour)
	tp.o.Total = 2
	for _, k := range []string{"a", "b", "c"} {
		tp.Refill(k, "plan")
	}
	tp.Wait()
	assert.Equal(t, 2, tp.Size(), "no more than Total")
	_, ok := tp.Take("c")
	assert.False(t, ok, "the third key got none")
	_, ok = tp.Take("a")
	require.True(t, ok)
	tp.Refill("c", "plan")
	tp.Wait()
	_, ok = tp.Take("c")
	assert.True(t, ok, "room again once one was taken")
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.Pool.mu.Lock()
	defer tp.Pool.mu.Unlock()
	assert.Len(t, tp.ready, 1, "only b holds one")
	assert.Empty(t, tp.filling)
}
