package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// far is a deadline no test reaches.
var far = time.Now().Add(time.Hour)

func noReport(executor.QueueInfo) error { return nil }

// queued starts acquire for user in a goroutine and returns a channel
// that yields its outcome; it returns once the request is in the queue.
func queued(t *testing.T, q *admission, ctx context.Context, user string, deadline time.Time) <-chan outcome {
	t.Helper()
	before := q.stats().Waiting
	out := make(chan outcome, 1)
	go func() {
		free, err := q.acquire(ctx, user, 0, deadline, noReport)
		out <- outcome{user, free, err}
	}()
	require.Eventually(t, func() bool { return q.stats().Waiting > before || len(out) > 0 }, 10*time.Second, time.Millisecond)
	return out
}

type outcome struct {
	user string
	free func()
	err  error
}

func mustRun(t *testing.T, q *admission, user string) func() {
	t.Helper()
	free, err := q.acquire(context.Background(), user, 0, far, noReport)
	require.NoError(t, err)
	return free
}

func TestAdmissionQueueLimitIsExact(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 2, MaxRunsPerUser: 2, MaxQueue: 3, MaxMemoryBytes: -1})
	frees := []func(){mustRun(t, q, "u1"), mustRun(t, q, "u2")}
	var waits []<-chan outcome
	for i := range 3 {
		waits = append(waits, queued(t, q, context.Background(), fmt.Sprint("w", i), far))
	}
	_, err := q.acquire(context.Background(), "late", 0, far, noReport)
	var e *Error
	require.ErrorAs(t, err, &e, "the fourth waiter is past MaxQueue")
	assert.Equal(t, KindOverloaded, e.Kind)
	assert.True(t, e.Retry, "nothing ran: the client may send it again")
	assert.Positive(t, e.RetryAfter)
	assert.Equal(t, AdmissionStats{Running: 2, Waiting: 3, MemoryBytes: 2 * defaultRunMemory}, q.stats())

	for _, f := range frees {
		f()
	}
	for i, w := range waits[:2] {
		o := <-w
		require.NoError(t, o.err, "waiter %d", i)
		defer o.free()
	}
	select {
	case o := <-waits[2]:
		t.Fatalf("a third run started while two hold the slots: %+v", o)
	default:
	}
}

func TestAdmissionTakesTurnsAcrossUsers(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 2, MaxRunsPerUser: 2, MaxMemoryBytes: -1})
	a1, a2 := mustRun(t, q, "a"), mustRun(t, q, "a")
	var aq []<-chan outcome
	for range 28 {
		aq = append(aq, queued(t, q, context.Background(), "a", far))
	}
	b := queued(t, q, context.Background(), "b", far)

	a1()
	o := <-b
	require.NoError(t, o.err, "b's single request runs on the first free slot, before a's 28 queued ones")
	for i, w := range aq {
		select {
		case got := <-w:
			t.Fatalf("a's waiter %d ran before b: %+v", i, got)
		default:
		}
	}
	a2()
	first := <-aq[0]
	require.NoError(t, first.err, "a's queue is served in order")
	o.free()
	second := <-aq[1]
	require.NoError(t, second.err)
	first.free()
	second.free()
	for _, w := range aq[2:] {
		got := <-w
		require.NoError(t, got.err)
		got.free()
	}
	assert.Equal(t, AdmissionStats{}, q.stats())
}

func TestAdmissionPerUserCap(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 8, MaxRunsPerUser: 4, MaxMemoryBytes: -1})
	var mu sync.Mutex
	running, peak := 0, 0
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			free, err := q.acquire(context.Background(), "chat-inventor", 0, far, noReport)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			free()
		}()
	}
	require.Eventually(t, func() bool { return q.stats().Waiting == 16 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 4, q.stats().Running, "one user holds at most MaxRunsPerUser slots")
	other := mustRun(t, q, "someone-else")
	other()
	close(release)
	wg.Wait()
	assert.Equal(t, 4, peak)
}

func TestAdmissionMemoryBound(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 10, MaxRunsPerUser: 10, MaxMemoryBytes: 3 << 30})
	free, err := q.acquire(context.Background(), "u", 2<<30, far, noReport)
	require.NoError(t, err)
	w := queued(t, q, context.Background(), "v", far) // the default 2 GiB does not fit beside 2 GiB
	_, err = q.acquire(context.Background(), "x", 1<<20, time.Now().Add(50*time.Millisecond), noReport)
	assert.Equal(t, KindOverloaded, KindOf(err), "a later request that would fit still waits its turn: %v", err)
	free()
	o := <-w
	require.NoError(t, o.err)
	o.free()

	big, err := q.acquire(context.Background(), "u", 8<<30, far, noReport)
	require.NoError(t, err, "a run larger than the bound runs alone")
	big()
}

func TestAdmissionWaitEnds(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 1, MaxMemoryBytes: -1})
	free := mustRun(t, q, "u")
	defer free()

	o := <-queued(t, q, context.Background(), "v", time.Now().Add(50*time.Millisecond))
	assert.Equal(t, KindOverloaded, KindOf(o.err), "a wait past the deadline is overloaded: %v", o.err)

	ctx, cancel := context.WithCancel(context.Background())
	w := queued(t, q, ctx, "v", far)
	cancel()
	o = <-w
	assert.True(t, errors.Is(o.err, context.Canceled), "%v", o.err)
	assert.Equal(t, AdmissionStats{Running: 1, MemoryBytes: defaultRunMemory}, q.stats(), "waiters that gave up left the queue")
}

func TestAdmissionReportsPosition(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 1, MaxRunsPerUser: 1, MaxMemoryBytes: -1})
	free := mustRun(t, q, "u")
	_ = queued(t, q, context.Background(), "a", far)
	_ = queued(t, q, context.Background(), "a", far)
	var mu sync.Mutex
	var seen []executor.QueueInfo
	done := make(chan error, 1)
	go func() {
		f, err := q.acquire(context.Background(), "b", 0, far, func(qi executor.QueueInfo) error {
			mu.Lock()
			seen = append(seen, qi)
			mu.Unlock()
			return nil
		})
		if err == nil {
			defer f()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	assert.Equal(t, 2, seen[0].Position, "b runs after a's first request, before a's second")
	mu.Unlock()

	// A report that fails (the client went away) ends the wait.
	_, err := q.acquire(context.Background(), "c", 0, far, func(executor.QueueInfo) error { return errors.New("gone") })
	assert.EqualError(t, err, "gone")
	free()
}
