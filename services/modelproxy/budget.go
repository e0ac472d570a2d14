package modelproxy

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"
)

// DefaultBodyBudget is the size of the BodyBudget a Proxy makes for itself
// when Options.Bodies is nil.
const DefaultBodyBudget = 256 << 20

// BodyBudget bounds the request-body bytes the model proxies of one gateway
// hold in memory at once: a call reserves its body's declared length
// before reading it and gives the reservation back once the upstream has
// taken the body, so N sandboxes sending 30 MiB bodies wait for each other
// instead of growing the gateway's heap by N*30 MiB. Share one BodyBudget
// between all the proxies of a gateway (Options.Bodies). It is safe for
// concurrent use.
type BodyBudget struct {
	sem  *semaphore.Weighted
	size int64

	mu   sync.Mutex
	held int64 // bytes of body buffers alive now
	peak int64
}

// NewBodyBudget returns a budget of size bytes (DefaultBodyBudget when
// size <= 0).
func NewBodyBudget(size int64) *BodyBudget {
	if size <= 0 {
		size = DefaultBodyBudget
	}
	return &BodyBudget{sem: semaphore.NewWeighted(size), size: size}
}

// Size is the budget in bytes.
func (b *BodyBudget) Size() int64 { return b.size }

// Held is the bytes of request bodies the proxies hold now.
func (b *BodyBudget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Peak is the largest Held seen since NewBodyBudget.
func (b *BodyBudget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// reservation is one call's hold on the per-sandbox and per-gateway byte
// budgets; release gives both back once.
type reservation struct {
	gw, sb  *semaphore.Weighted
	budget  *BodyBudget
	n       int64
	counted int64 // bytes counted in budget.held
	once    sync.Once
}

// reserve waits for n bytes of the sandbox's and the gateway's budgets.
func reserve(ctx context.Context, sandbox *semaphore.Weighted, b *BodyBudget, n int64) (*reservation, error) {
	if err := sandbox.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("waiting for the sandbox's body budget: %w", err)
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		sandbox.Release(n)
		return nil, fmt.Errorf("waiting for the gateway's body budget: %w", err)
	}
	return &reservation{gw: b.sem, sb: sandbox, budget: b, n: n}, nil
}

// hold counts a buffer of n bytes made under the reservation.
func (r *reservation) hold(n int64) {
	r.budget.mu.Lock()
	r.budget.held += n
	r.budget.peak = max(r.budget.peak, r.budget.held)
	r.budget.mu.Unlock()
	r.counted += n
}

func (r *reservation) release() {
	r.once.Do(func() {
		r.budget.mu.Lock()
		r.budget.held -= r.counted
		r.budget.mu.Unlock()
		r.gw.Release(r.n)
		r.sb.Release(r.n)
	})
}
