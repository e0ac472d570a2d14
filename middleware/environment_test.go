package middleware_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

// probingExecutor is the tracing executor with environment snapshots.
type probingExecutor struct {
	*tracingExecutor
	calls atomic.Int32
	err   error
}

func (p *probingExecutor) Environment(_ context.Context, spec executor.Spec) (executor.Environment, error) {
	p.calls.Add(1)
	if p.err != nil {
		return executor.Environment{}, p.err
	}
	return executor.Environment{Mode: "test", Image: spec.Image, OS: "TestOS 1", Tools: map[string]string{"claude": "2.1.330 (Claude Code)"}}, nil
}

// Capabilities declares the snapshots.
func (p *probingExecutor) Capabilities() executor.Capabilities {
	c := p.tracingExecutor.Capabilities()
	c.Environment = true
	return c
}

func withProber(p *probingExecutor) envOption {
	return func(e *env, o *middleware.Options) {
		p.tracingExecutor = e.ex
		o.NewExecutor = func(context.Context, hclog.Logger) (executor.Executor, error) { return p, nil }
	}
}

// TestEnvironmentSummaryInTheSystemPrompt: with an executor that takes
// snapshots, the agent's system prompt ends with the summary; an
// assistant that opts out, or a failed snapshot, runs without it.
func TestEnvironmentSummaryInTheSystemPrompt(t *testing.T) {
	summary := executor.Environment{Mode: "test", OS: "TestOS 1", Tools: map[string]string{"claude": "2.1.330 (Claude Code)"}}.Summary()
	tests := map[string]struct {
		omit bool
		err  error
		want string
	}{
		"appended":        {want: "be brief\n\n" + summary},
		"opted out":       {omit: true, want: "be brief"},
		"snapshot failed": {err: errors.New("image gone"), want: "be brief"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &probingExecutor{err: tc.err}
			e := newEnv(t, withProber(p), func(e *env, _ *middleware.Options) { e.coder.Sandbox.OmitEnvironment = tc.omit })
			require.NoError(t, e.o.Settle(context.Background()), "the prefetch at New ends")
			assert.Equal(t, int32(1), p.calls.Load(), "New takes the snapshot of each sandboxed assistant once")
			e.setScript(scripted.Text(executor.Usage{InputTokens: 3}, "ok"))
			_, err := e.h.Handle(context.Background(), request("1"), nil)
			require.NoError(t, err)
			runs := e.runner.Requests()
			require.Len(t, runs, 1)
			assert.Equal(t, tc.want, runs[0].SystemPrompt)

			env, err := e.o.Environment(context.Background(), e.coder)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, "agentbox/sandbox-claude:latest", env.Image)
			}
			_, err = e.o.Environment(context.Background(), &middleware.Assistant{ID: "qa"})
			assert.ErrorIs(t, err, middleware.ErrNoEnvironment, "a plain assistant has no sandbox")
		})
	}
}

// TestNoEnvironmentWithoutProber: executors that take no snapshots leave
// the prompt as it is.
func TestNoEnvironmentWithoutProber(t *testing.T) {
	e := newEnv(t)
	_, err := e.o.Environment(context.Background(), e.coder)
	assert.ErrorIs(t, err, middleware.ErrNoEnvironment)
}
