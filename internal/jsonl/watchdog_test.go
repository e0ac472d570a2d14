package jsonl

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWatchdogFiresWhenSilent(t *testing.T) {
	ctx, wd := WithWatchdog(context.Background(), 50*time.Millisecond)
	defer wd.Stop()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("watchdog did not fire")
	}
	err := context.Cause(ctx)
	require.ErrorIs(t, err, ErrStalled)
	assert.Equal(t, err, wd.Err())
	var se *StallError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 50*time.Millisecond, se.Timeout)
	assert.GreaterOrEqual(t, se.Idle, 50*time.Millisecond)
	assert.Contains(t, err.Error(), "raise the stall timeout")
}

func TestWatchdogKickKeepsAlive(t *testing.T) {
	const limit = 300 * time.Millisecond
	ctx, wd := WithWatchdog(context.Background(), limit)
	defer wd.Stop()
	// A loaded machine may not run this loop for longer than the limit;
	// then the watchdog rightly fires, and the test logs it rather than
	// fail. It fails when the watchdog fires with every gap under it.
	var gap time.Duration
	last := time.Now()
	deadline := last.Add(4 * limit)
	for now := last; now.Before(deadline); now = time.Now() {
		wd.Kick()
		gap, last = max(gap, time.Since(last)), time.Now()
		time.Sleep(10 * time.Millisecond)
	}
	if ctx.Err() != nil && gap >= limit {
		t.Logf("the machine held this test for %s, past the %s limit: the watchdog fired as it should", gap, limit)
		return
	}
	require.NoError(t, ctx.Err(), "a kicked watchdog must not fire (longest gap between kicks %s)", gap)
	assert.NoError(t, wd.Err())
	<-ctx.Done() // silent from now on: it fires
	assert.ErrorIs(t, context.Cause(ctx), ErrStalled)
}

func TestWatchdogStop(t *testing.T) {
	ctx, wd := WithWatchdog(context.Background(), 30*time.Millisecond)
	wd.Stop()
	wd.Stop()
	time.Sleep(60 * time.Millisecond)
	assert.NoError(t, wd.Err())
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
}

func TestWatchdogParentCancel(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	ctx, wd := WithWatchdog(parent, time.Hour)
	defer wd.Stop()
	cancel()
	<-ctx.Done()
	assert.NoError(t, wd.Err())
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
}

// TestWatchdogReader shows the intended wiring: the watched context governs
// the producer (here a pipe the context closes, as a killed process would),
// the consumer reads through wd.Reader and sees the stall as its error.
func TestWatchdogReader(t *testing.T) {
	const limit = 100 * time.Millisecond
	ctx, wd := WithWatchdog(context.Background(), limit)
	defer wd.Stop()
	pr, pw := io.Pipe()
	var gap time.Duration // the longest between two writes
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		for range 5 {
			_, _ = pw.Write([]byte("tick\n"))
			gap, last = max(gap, time.Since(last)), time.Now()
			time.Sleep(30 * time.Millisecond)
		}
		<-ctx.Done() // hang until the watchdog kills the "process"
		_ = pw.Close()
	}()
	r := NewReader(wd.Reader(pr), 0)
	lines := 0
	var err error
	for {
		if _, err = r.ReadLine(); err != nil {
			break
		}
		lines++
	}
	_ = pr.Close() // a writer held past the stall is still writing
	<-done
	if lines < 5 && gap >= limit {
		t.Logf("the machine held the writer for %s, past the %s limit: the watchdog fired as it should", gap, limit)
		return
	}
	assert.Equal(t, 5, lines, "lines 30ms apart must pass a 100ms watchdog (longest gap %s)", gap)
	require.ErrorIs(t, err, ErrStalled)
	assert.False(t, errors.Is(err, io.EOF))
}
