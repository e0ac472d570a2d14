package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// PoolKey hashes what a backend's pooled sandbox is made for, so that a
// request takes a pooled sandbox only of its own configuration: the image
// and spec s without what a pooled sandbox takes at adoption (the chat,
// the assistant, its config hash, the workspace quota). more is what else
// the backend fixes when the sandbox starts (the Kubernetes executor's
// claim size).
func PoolKey(image string, s Spec, more ...any) string {
	b, _ := json.Marshal(struct {
		Image, User, Network string
		Memory, Pids         int64
		CPUs                 float64
		Timeout              time.Duration
		Egress, Session      bool
		Runtime              string
		Env                  []string
		More                 []any
	}{image, s.User, s.Network, s.MemoryBytes, s.PidsLimit, s.CPUs,
		s.Timeout, s.Egress, s.IdleTTL > 0, s.Runtime, s.Env, more})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// The pool's bounds, the same on every backend that pools sandboxes.
const (
	// DefaultPoolIdle is how long a pooled sandbox waits unused before it
	// is removed.
	DefaultPoolIdle = 10 * time.Minute
	// MaxPool bounds the pooled sandboxes per configuration.
	MaxPool = 64
)

// PoolIdle checks a backend's Options.Pool and Options.PoolIdle and
// returns the idle time with its default applied (0 without a pool). Its
// errors wrap ErrInvalid and name the options.
func PoolIdle(pool int, idle time.Duration) (time.Duration, error) {
	if pool < 0 || pool > MaxPool {
		return 0, fmt.Errorf("Options.Pool %d is out of range; give 0 (off) to %d sandboxes per configuration: %w", pool, MaxPool, ErrInvalid)
	}
	switch {
	case pool == 0 && idle != 0:
		return 0, fmt.Errorf("Options.PoolIdle is set but Options.Pool is 0 (no pool); set Pool or drop PoolIdle: %w", ErrInvalid)
	case pool == 0:
		return 0, nil
	case idle == 0:
		return DefaultPoolIdle, nil
	case idle < time.Second:
		return 0, fmt.Errorf("Options.PoolIdle %v is under a second: %w", idle, ErrInvalid)
	}
	return idle, nil
}

// Pool is the bookkeeping of a backend's pool of started sandboxes, kept
// ready by key for a request to come: by configuration (a PoolKey) for
// the first request of new chats, or by chat for its next request (the
// Kubernetes executor's successors). It keeps which are ready and since
// when, which are being started, and when the pool gives up. The backend starts, adopts and removes them (PoolConfig);
// P is its plan of a sandbox, E its pooled sandbox. Make it with NewPool.
type Pool[P, E any] struct {
	o PoolConfig[P, E]

	mu      sync.Mutex
	ready   map[string][]pooled[E] // by key, oldest first
	filling map[string]int
	closed  bool
	failed  int  // fills that failed in a row
	off     bool // turned off after PoolMaxFailures of them
	fills   sync.WaitGroup
}

// PoolConfig is what a Pool needs of its backend.
type PoolConfig[P, E any] struct {
	// Size is how many sandboxes to keep ready per key; Idle how long
	// one waits unused before it is dropped.
	Size int
	Idle time.Duration
	// Total, when positive, bounds the sandboxes ready or being started,
	// all keys together: a Refill past it starts nothing.
	Total int
	// Start makes one sandbox of plan p for key and returns once it is
	// ready; an error wrapping ErrNotRunning means the backend is closing,
	// one wrapping ErrBusy that what the sandbox was for is in use (the
	// fill is skipped; neither counts as a failure).
	Start func(p P, key string) (E, error)
	// Drop removes a sandbox the pool no longer keeps.
	Drop func(sb E, why string)
	// Failed is told of each fill that failed (not for a closing
	// backend); off is true for the failure that turned the pool off.
	Failed func(err error, off bool)
}

// PoolMaxFailures is how many fills in a row may fail before a Pool turns
// itself off (a backend that cannot start its pooled sandboxes would
// otherwise try, and fail, after every request).
const PoolMaxFailures = 3

type pooled[E any] struct {
	sb      E
	expires time.Time
}

// NewPool returns an empty pool; it fills on Refill.
func NewPool[P, E any](o PoolConfig[P, E]) *Pool[P, E] {
	return &Pool[P, E]{o: o, ready: map[string][]pooled[E]{}, filling: map[string]int{}}
}

// Take returns a ready sandbox of key, the newest (it has the most time
// left), dropping expired ones on the way; ok is false when there is none.
func (pl *Pool[P, E]) Take(key string) (sb E, ok bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	list := pl.ready[key]
	defer pl.setReady(key, nil)
	for len(list) > 0 {
		ent := list[len(list)-1]
		list = list[:len(list)-1]
		pl.ready[key] = list
		if time.Now().Before(ent.expires) {
			return ent.sb, true
		}
		go pl.o.Drop(ent.sb, "expired")
	}
	return sb, false
}

// setReady stores key's ready list, dropping the key when there is none
// (checking what is there when list is nil). pl.mu is held.
func (pl *Pool[P, E]) setReady(key string, list []pooled[E]) {
	if list == nil {
		list = pl.ready[key]
	}
	if len(list) == 0 {
		delete(pl.ready, key)
		return
	}
	pl.ready[key] = list
}

// Refill starts sandboxes of plan p in the background until the pool
// holds Size of key, unless it is closed or off, or holds Total.
func (pl *Pool[P, E]) Refill(key string, p P) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	total := 0
	if pl.o.Total > 0 {
		for _, list := range pl.ready {
			total += len(list)
		}
		for _, n := range pl.filling {
			total += n
		}
	}
	for n := len(pl.ready[key]) + pl.filling[key]; n < pl.o.Size && !pl.closed && !pl.off && (pl.o.Total <= 0 || total < pl.o.Total); n++ {
		total++
		pl.filling[key]++
		pl.fills.Add(1)
		go pl.fill(p, key)
	}
}

// fill starts one sandbox of p for key.
func (pl *Pool[P, E]) fill(p P, key string) {
	defer pl.fills.Done()
	expires := time.Now().Add(pl.o.Idle)
	sb, err := pl.o.Start(p, key)
	pl.mu.Lock()
	if pl.filling[key]--; pl.filling[key] == 0 {
		delete(pl.filling, key) // keys may be many (one per chat) and short-lived
	}
	closed := pl.closed
	if err == nil && !closed {
		pl.ready[key] = append(pl.ready[key], pooled[E]{sb: sb, expires: expires})
	}
	turnedOff := false
	closing := errors.Is(err, ErrNotRunning) || errors.Is(err, ErrBusy)
	switch {
	case err == nil:
		pl.failed = 0
	case !closing:
		pl.failed++
		if pl.failed >= PoolMaxFailures && !pl.off {
			pl.off, turnedOff = true, true
		}
	}
	pl.mu.Unlock()
	switch {
	case err != nil && !closing:
		pl.o.Failed(err, turnedOff)
	case err == nil && closed:
		pl.o.Drop(sb, "the executor is closing")
	}
}

// Expire drops the sandboxes that waited longer than Idle.
func (pl *Pool[P, E]) Expire() {
	now := time.Now()
	var old []E
	pl.mu.Lock()
	for key, list := range pl.ready {
		keep := list[:0]
		for _, ent := range list {
			if now.Before(ent.expires) {
				keep = append(keep, ent)
			} else {
				old = append(old, ent.sb)
			}
		}
		pl.setReady(key, keep)
	}
	pl.mu.Unlock()
	for _, sb := range old {
		pl.o.Drop(sb, "unused for PoolIdle")
	}
}

// Close drops every ready sandbox, refuses to fill from now on, and waits
// for the fills under way (what they start is dropped).
func (pl *Pool[P, E]) Close() {
	pl.mu.Lock()
	pl.closed = true
	all := pl.readyLocked()
	pl.ready = map[string][]pooled[E]{}
	pl.mu.Unlock()
	for _, sb := range all {
		pl.o.Drop(sb, "the executor is closing")
	}
	pl.fills.Wait()
}

// Size reports how many sandboxes are ready, all keys together.
func (pl *Pool[P, E]) Size() int { return len(pl.Ready()) }

// Wait waits for the fills under way.
func (pl *Pool[P, E]) Wait() { pl.fills.Wait() }

// Off reports whether the pool turned itself off (PoolMaxFailures).
func (pl *Pool[P, E]) Off() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.off
}

// Ready returns the ready sandboxes, all keys together.
func (pl *Pool[P, E]) Ready() []E {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.readyLocked()
}

func (pl *Pool[P, E]) readyLocked() []E {
	var all []E
	for _, list := range pl.ready {
		for _, ent := range list {
			all = append(all, ent.sb)
		}
	}
	return all
}
