package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Registry tracks a backend's sandboxes from the start of their Create to
// their Close, so that the backend's Close can refuse new Creates, wait for
// those under way and close those still open, and a Create that finishes
// after Close closes what it made instead of leaking it. Every backend
// keeps one; the zero value is not usable, call NewRegistry.
type Registry[S interface{ Close(context.Context) error }] struct {
	mu       sync.Mutex
	closed   bool
	pending  map[string]bool // ids being created
	open     map[string]S
	inflight sync.WaitGroup // Creates under way
}

// NewRegistry returns an empty registry.
func NewRegistry[S interface{ Close(context.Context) error }]() *Registry[S] {
	return &Registry[S]{pending: map[string]bool{}, open: map[string]S{}}
}

// Begin records that the Create of sandbox id started. It fails, wrapping
// ErrNotRunning, once the registry is closed; otherwise the caller must
// call the returned function when its Create returns.
func (r *Registry[S]) Begin(id string) (done func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("the executor is closed: %w", ErrNotRunning)
	}
	r.pending[id] = true
	r.inflight.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.pending, id)
			r.mu.Unlock()
			r.inflight.Done()
		})
	}, nil
}

// Add registers sb, ready, under id. When the registry was closed while
// it was being made, Add closes sb (Close did not see it) and returns an
// error wrapping ErrNotRunning.
func (r *Registry[S]) Add(ctx context.Context, id string, sb S) error {
	r.mu.Lock()
	closed := r.closed
	if !closed {
		r.open[id] = sb
	}
	r.mu.Unlock()
	if closed {
		return fmt.Errorf("the executor was closed meanwhile: %w", errors.Join(ErrNotRunning, sb.Close(ctx)))
	}
	return nil
}

// Forget removes sandbox id (its Close calls it).
func (r *Registry[S]) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, id)
}

// Get returns the open sandbox id.
func (r *Registry[S]) Get(id string) (S, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.open[id]
	return sb, ok
}

// Holds reports whether sandbox id is being created or open.
func (r *Registry[S]) Holds(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, open := r.open[id]
	return r.pending[id] || open
}

// Open returns the sandboxes open now.
func (r *Registry[S]) Open() []S {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]S, 0, len(r.open))
	for _, sb := range r.open {
		out = append(out, sb)
	}
	return out
}

// Shut refuses new Creates from now on and reports whether this call was
// the one that closed the registry (false when it was already closed).
func (r *Registry[S]) Shut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	return true
}

// CloseAll waits for the Creates under way (each either registers its
// sandbox before Shut's effect or closes it itself) and then closes every
// open sandbox. Call it after Shut. It returns how many it closed and
// their errors.
func (r *Registry[S]) CloseAll(ctx context.Context) (int, error) {
	r.inflight.Wait()
	open := r.Open()
	var errs []error
	for _, sb := range open {
		errs = append(errs, sb.Close(ctx))
	}
	return len(open), errors.Join(errs...)
}
