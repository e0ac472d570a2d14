package middleware

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of Admission. The run and memory bounds are derived from the
// machine when left zero (see Admission).
const (
	DefaultMaxQueue = 100
	// DefaultMaxWait is long because a coding agent's run takes minutes:
	// a queue of a few rounds is minutes long, and streamed clients see
	// their position meanwhile.
	DefaultMaxWait = 5 * time.Minute
	// defaultRunMemory is what a run reserves when its assistant sets no
	// memory limit (config's default max_memory).
	defaultRunMemory = executor.DefaultMemoryBytes
)

// Admission bounds the sandboxed work the gateway does at once. A
// sandboxed request holds a run slot from the moment it is admitted (after
// its chat's lease) to the end of its teardown, so MaxRuns is also the most
// sandboxes this gateway has at once. Requests that cannot run yet wait in
// a queue that is fair across users: when a slot frees, the users with
// waiting requests take turns, so one user's burst delays another user's
// request by at most one run. Past MaxQueue waiting requests, or after
// MaxWait, a request fails with KindOverloaded, which is retry-safe and
// carries a Retry-After estimate.
//
// The zero value derives every bound from this machine; the derivation
// assumes the executor's containers run here (with DOCKER_HOST on another
// machine, set the bounds).
type Admission struct {
	// Off turns admission control off: every request runs at once. For
	// gateways with their own limiter in front, and for benchmarks.
	Off bool
	// MaxRuns caps the sandboxed requests in flight (0: four per core).
	MaxRuns int
	// MaxRunsPerUser caps one user's sandboxed requests in flight (0: half
	// of MaxRuns, at least one), so that a user who invents chat ids
	// cannot take every sandbox.
	MaxRunsPerUser int
	// MaxMemoryBytes caps the sum of the memory limits (max_memory) of the
	// runs in flight (0: three quarters of this machine's memory; negative:
	// no memory bound). A run whose limit alone is over the cap still runs
	// when nothing else does.
	MaxMemoryBytes int64
	// MaxStarts caps sandboxes being created at once, the CPU-heavy part
	// of a run (0: one per core).
	MaxStarts int
	// MaxQueue caps the requests waiting for a run slot (0:
	// DefaultMaxQueue); requests past it fail at once with KindOverloaded.
	MaxQueue int
	// MaxWait bounds a request's wait before it runs, the wait for its
	// chat's lease included (0: DefaultMaxWait).
	MaxWait time.Duration
}

// WithDefaults returns a with its zero fields derived from this machine,
// as the Orchestrator applies them: what an operator sizing a machine, or
// a benchmark holding a baseline to the same bounds, reads.
func (a Admission) WithDefaults() Admission {
	cpus := runtime.NumCPU()
	if a.MaxRuns <= 0 {
		a.MaxRuns = 4 * cpus
	}
	if a.MaxRunsPerUser <= 0 {
		a.MaxRunsPerUser = max(1, a.MaxRuns/2)
	}
	if a.MaxMemoryBytes == 0 {
		a.MaxMemoryBytes = executor.HostMemoryBytes() / 4 * 3
	}
	if a.MaxStarts <= 0 {
		a.MaxStarts = cpus
	}
	if a.MaxQueue <= 0 {
		a.MaxQueue = DefaultMaxQueue
	}
	if a.MaxWait <= 0 {
		a.MaxWait = DefaultMaxWait
	}
	return a
}

// admission is the fair queue and the start bound of one Orchestrator.
type admission struct {
	cfg    Admission
	starts chan struct{} // one token per sandbox being created

	// reclaim removes an idle session container to free its memory, and
	// reports whether there was one (nil: none are kept).
	reclaim func() bool

	mu      sync.Mutex
	running int
	memory  int64
	// idleMem is the memory of the idle session containers: it counts
	// toward MaxMemoryBytes, not toward the run slots.
	idleMem int64
	perUser map[string]int
	queues  map[string][]*waiter // per user, in arrival order
	ring    []string             // users with waiters, in turn order
	next    int                  // index in ring of the user whose turn is next
	waiting int
	runTime time.Duration // moving average of a run's duration, for Retry-After
}

// waiter is one queued request.
type waiter struct {
	user    string
	memory  int64
	arrived time.Time
	ready   chan struct{} // closed when the request is admitted
}

func newAdmission(cfg Admission) *admission {
	cfg = cfg.WithDefaults()
	return &admission{cfg: cfg, starts: make(chan struct{}, cfg.MaxStarts),
		perUser: make(map[string]int), queues: make(map[string][]*waiter)}
}

// What keeps a request from running now.
const (
	fitsNow     = iota
	userFull    // its user holds MaxRunsPerUser slots
	gatewayFull // the run count or the memory bound is reached
)

// fits says whether a run of user with memory can start now, or what
// stops it. Held: mu.
func (q *admission) fits(user string, memory int64) int {
	switch {
	case q.running == 0:
		return fitsNow
	case q.perUser[user] >= q.cfg.MaxRunsPerUser:
		return userFull
	case q.running >= q.cfg.MaxRuns, q.cfg.MaxMemoryBytes >= 0 && q.memory+q.idleMem+memory > q.cfg.MaxMemoryBytes:
		return gatewayFull
	}
	return fitsNow
}

// take records a run as admitted. Held: mu.
func (q *admission) take(user string, memory int64) {
	q.running++
	q.memory += memory
	q.perUser[user]++
}

// acquire waits for a run slot for user until deadline, calling report
// when the request starts to wait and when its position changes (at most
// once a second). It returns the function that gives the slot back, or a
// KindOverloaded error when the queue is full or the deadline passed, or
// ctx's error.
func (q *admission) acquire(ctx context.Context, user string, memory int64, deadline time.Time, report func(executor.QueueInfo) error) (func(), error) {
	if memory <= 0 {
		memory = defaultRunMemory
	}
	q.mu.Lock()
	if q.waiting == 0 && q.fits(user, memory) == fitsNow {
		q.take(user, memory)
		q.mu.Unlock()
		return q.releaser(user, memory), nil
	}
	if q.waiting >= q.cfg.MaxQueue {
		err := q.overloaded(fmt.Sprintf("%d requests are already waiting for a sandbox", q.waiting))
		q.mu.Unlock()
		return nil, err
	}
	w := &waiter{user: user, memory: memory, arrived: time.Now(), ready: make(chan struct{})}
	if len(q.queues[user]) == 0 {
		q.ring = append(q.ring, user)
	}
	q.queues[user] = append(q.queues[user], w)
	q.waiting++
	// Another user's head may be blocked by its own cap while this
	// request fits.
	q.dispatch()
	q.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := 0
	update := func() error {
		q.reclaimIdle(memory)
		st, ok := q.status(w)
		if !ok || st.Position == last {
			return nil
		}
		last = st.Position
		return report(st)
	}
	err := update()
	for err == nil {
		select {
		case <-w.ready:
			return q.releaser(user, memory), nil
		case <-tick.C:
			err = update()
		case <-timer.C:
			err = q.overloaded(fmt.Sprintf("the request waited %v for a sandbox", q.cfg.MaxWait))
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if !q.leave(w) {
		// Admitted while giving up: give the slot back.
		q.releaser(user, memory)()
	}
	return nil, err
}

// releaser returns the function that ends an admitted run: it frees the
// slot, updates the run-time average and admits the next waiters.
func (q *admission) releaser(user string, memory int64) func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.running--
			q.memory -= memory
			if q.perUser[user]--; q.perUser[user] == 0 {
				delete(q.perUser, user)
			}
			d := time.Since(start)
			if q.runTime == 0 {
				q.runTime = d
			} else {
				q.runTime = (q.runTime*7 + d) / 8
			}
			q.dispatch()
		})
	}
}

// dispatch admits waiters while they fit. The users with waiters share
// the slots max-min fairly: the next run goes to the user with the fewest
// runs in flight, ties broken by taking turns in ring order, and a user at
// its own cap passes. When the chosen request does not fit the gateway's
// bounds, nothing behind it starts either, so that a large request is not
// starved by smaller ones. Held: mu.
func (q *admission) dispatch() {
	for len(q.ring) > 0 {
		best := -1
		for i := range len(q.ring) {
			k := (q.next + i) % len(q.ring)
			user := q.ring[k]
			if q.fits(user, q.queues[user][0].memory) == userFull {
				continue
			}
			if best < 0 || q.perUser[user] < q.perUser[q.ring[best]] {
				best = k
			}
		}
		if best < 0 {
			return
		}
		user := q.ring[best]
		w := q.queues[user][0]
		if q.fits(user, w.memory) != fitsNow {
			return
		}
		q.take(user, w.memory)
		q.pop(best)
		close(w.ready)
	}
}

// pop removes the head of the queue of the user at ring index k and moves
// the turn to the user after it. Held: mu.
func (q *admission) pop(k int) {
	user := q.ring[k]
	rest := q.queues[user][1:]
	q.waiting--
	if len(rest) > 0 {
		q.queues[user] = rest
		q.next = (k + 1) % len(q.ring)
		return
	}
	delete(q.queues, user)
	q.ring = append(q.ring[:k], q.ring[k+1:]...)
	if len(q.ring) == 0 {
		q.next = 0
		return
	}
	q.next = k % len(q.ring)
}

// leave removes w from its queue; it reports false when w was admitted
// meanwhile.
func (q *admission) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.ready:
		return false
	default:
	}
	list := q.queues[w.user]
	for i, x := range list {
		if x != w {
			continue
		}
		q.waiting--
		if len(list) > 1 {
			q.queues[w.user] = append(list[:i:i], list[i+1:]...)
			break
		}
		delete(q.queues, w.user)
		for k, u := range q.ring {
			if u == w.user {
				q.ring = append(q.ring[:k], q.ring[k+1:]...)
				if k < q.next {
					q.next--
				}
				if len(q.ring) == 0 || q.next >= len(q.ring) {
					q.next = 0
				}
				break
			}
		}
		break
	}
	// A waiter that leaves may unblock others (another user's head that a
	// stricter head was not blocking, or none at all).
	q.dispatch()
	return true
}

// status is w's place in the queue, as dispatch would serve it if no
// run ended early: each other user with waiters runs up to as many
// requests before w as w has ahead of it in its own queue, one more when
// that user would be served first (fewer runs in flight, or as many and an
// earlier turn).
func (q *admission) status(w *waiter) (executor.QueueInfo, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	idx := slices.Index(q.queues[w.user], w)
	if idx < 0 {
		return executor.QueueInfo{}, false
	}
	turn := func(u string) int { return (slices.Index(q.ring, u) - q.next + len(q.ring)) % len(q.ring) }
	mine, myTurn := q.perUser[w.user], turn(w.user)
	ahead := idx
	for _, u := range q.ring {
		if u == w.user {
			continue
		}
		rounds := idx
		if n := q.perUser[u]; n < mine || n == mine && turn(u) < myTurn {
			rounds++
		}
		ahead += min(len(q.queues[u]), rounds)
	}
	return executor.QueueInfo{Position: ahead + 1, WaitedMS: time.Since(w.arrived).Milliseconds()}, true
}

// overloaded is the KindOverloaded error with a Retry-After estimate: the
// average run time for each full round of the queue ahead. Held: mu.
func (q *admission) overloaded(why string) *Error {
	after := 5 * time.Second
	if q.runTime > 0 {
		rounds := time.Duration(q.waiting/q.cfg.MaxRuns + 1)
		after = min(max(q.runTime*rounds, time.Second), time.Minute)
	}
	e := Errorf(KindOverloaded, nil, "the gateway is at its sandbox capacity (%s); send the request again in %v", why, after.Round(time.Second))
	e.RetryAfter = after
	return e
}

// startSlot takes one of the MaxStarts tokens, waiting for ctx; the
// returned function gives it back.
func (q *admission) startSlot(ctx context.Context) (func(), error) {
	select {
	case q.starts <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-q.starts }) }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// AdmissionStats is a snapshot of the admission control.
type AdmissionStats struct {
	// Running is the number of sandboxed requests holding a run slot.
	Running int
	// Waiting is the number of requests in the queue.
	Waiting int
	// MemoryBytes is the sum of the memory limits of the running requests.
	MemoryBytes int64
}

func (q *admission) stats() AdmissionStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return AdmissionStats{Running: q.running, Waiting: q.waiting, MemoryBytes: q.memory}
}

// idle adds delta to the memory of the idle session containers; a
// container's removal makes room for waiters.
func (q *admission) idle(delta int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idleMem += delta
	if delta < 0 {
		q.dispatch()
	}
}

// reclaimIdle removes an idle session container when a request of memory
// waits and would fit without the idle containers' memory: a run goes
// before an idle container.
func (q *admission) reclaimIdle(memory int64) {
	q.mu.Lock()
	idle := q.idleMem > 0 && q.cfg.MaxMemoryBytes >= 0 && q.memory+q.idleMem+memory > q.cfg.MaxMemoryBytes
	q.mu.Unlock()
	if idle && q.reclaim != nil {
		q.reclaim()
	}
}
