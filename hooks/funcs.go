package hooks

import (
	"context"

	"github.com/agentbox/agentbox/executor"
)

// Funcs implements Hooks with Go functions; a nil function is an absent
// hook. It serves Go-side assistants and tests.
type Funcs struct {
	CreateFunc func(ctx context.Context, hc *Context, messages []executor.Message) (*CreateResult, error)
	NextFunc   func(ctx context.Context, hc *Context, payload NextPayload) (*NextResult, error)
}

var _ Hooks = Funcs{}

// HasCreate implements Hooks.
func (f Funcs) HasCreate() bool { return f.CreateFunc != nil }

// HasNext implements Hooks.
func (f Funcs) HasNext() bool { return f.NextFunc != nil }

// Create implements Hooks.
func (f Funcs) Create(ctx context.Context, hc *Context, messages []executor.Message) (*CreateResult, error) {
	if f.CreateFunc == nil {
		return nil, nil
	}
	return f.CreateFunc(ctx, hc, messages)
}

// Next implements Hooks.
func (f Funcs) Next(ctx context.Context, hc *Context, payload NextPayload) (*NextResult, error) {
	if f.NextFunc == nil {
		return nil, nil
	}
	return f.NextFunc(ctx, hc, payload)
}
