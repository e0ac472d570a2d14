package jsonl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// ErrStalled is matched (errors.Is) by the *StallError of a Watchdog that
// fired: the watched output stayed silent for the whole timeout.
var ErrStalled = errors.New("jsonl: output stalled")

// StallError says how long the watched output was silent.
type StallError struct {
	// Timeout is the watchdog's configured silence limit.
	Timeout time.Duration
	// Idle is how long the output had been silent when the watchdog fired
	// (at least Timeout).
	Idle time.Duration
}

// Error implements error.
func (e *StallError) Error() string {
	return fmt.Sprintf("jsonl: no output for %s (stall watchdog, limit %s): the agent or its model stopped responding; raise the stall timeout if runs legitimately go quiet that long",
		e.Idle.Round(time.Millisecond), e.Timeout)
}

// Is makes errors.Is(err, ErrStalled) true.
func (e *StallError) Is(target error) bool { return target == ErrStalled }

// Watchdog cancels a context when it is not kicked for a configured time.
// Wire it so that the context governs the run (the CLI's exec) and kick it
// for every line or chunk of output; Reader does the kicking for a stream.
// When it fires, the context is cancelled with a *StallError as its cause
// (context.Cause) and Err returns the same error.
type Watchdog struct {
	timeout time.Duration
	cancel  context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	last    time.Time
	stalled error
	stopped bool
}

// WithWatchdog returns a context derived from parent and a Watchdog that
// cancels it after timeout without a Kick. The timer starts now. Call Stop
// when the run ends to release the timer and the context.
func WithWatchdog(parent context.Context, timeout time.Duration) (context.Context, *Watchdog) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &Watchdog{timeout: timeout, cancel: cancel, last: time.Now()}
	w.timer = time.AfterFunc(timeout, w.fire)
	return ctx, w
}

// fire runs when the timer expires; a Kick that raced with it wins when it
// moved the deadline.
func (w *Watchdog) fire() {
	w.mu.Lock()
	if w.stopped || w.stalled != nil {
		w.mu.Unlock()
		return
	}
	idle := time.Since(w.last)
	if idle < w.timeout {
		w.timer.Reset(w.timeout - idle)
		w.mu.Unlock()
		return
	}
	err := &StallError{Timeout: w.timeout, Idle: idle}
	w.stalled = err
	w.mu.Unlock()
	w.cancel(err)
}

// Kick records activity: the silence limit starts again from now.
func (w *Watchdog) Kick() {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

// Stop disarms the watchdog and cancels its context (with context.Canceled
// as the cause unless it had already fired). It is safe to call more than
// once.
func (w *Watchdog) Stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel(context.Canceled)
}

// Err returns the *StallError once the watchdog fired, nil before.
func (w *Watchdog) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalled
}

// Reader returns r wrapped so that every Read that returns data kicks the
// watchdog. After the watchdog fired, reads fail with its *StallError: a
// parser reading through it ends with the stall as its error even if the
// killed process's pipe only reports EOF.
func (w *Watchdog) Reader(r io.Reader) io.Reader { return &kickReader{r: r, w: w} }

type kickReader struct {
	r io.Reader
	w *Watchdog
}

func (k *kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		k.w.Kick()
	}
	if err != nil {
		if stall := k.w.Err(); stall != nil {
			return n, stall
		}
	}
	return n, err
}
