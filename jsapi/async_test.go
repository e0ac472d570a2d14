package jsapi_test

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// An async Create is awaited: what its Promise settles to counts as what a
// plain Create returns or throws. Before, any Promise meant "keep the
// conversation", so an access check written as async was bypassed.
func TestAsyncCreate(t *testing.T) {
	cases := map[string]struct {
		src     string
		want    []executor.Message
		wantErr string
		wantIs  error
	}{
		"async throw rejects": {
			src:     `async function Create(ctx) { throw new Error("access denied") }`,
			wantErr: "access denied", wantIs: hooks.ErrRejected,
		},
		"rejected promise rejects": {
			src:     `function Create(ctx) { return Promise.reject(new Error("no quota left")) }`,
			wantErr: "no quota left", wantIs: hooks.ErrRejected,
		},
		"throw after await rejects": {
			src:     `async function Create(ctx) { await null; await Promise.resolve(1); throw new Error("late check failed") }`,
			wantErr: "late check failed", wantIs: hooks.ErrRejected,
		},
		"resolve replaces": {
			src:  `function Create(ctx, messages) { return Promise.resolve({ messages: [{ role: "user", content: "replaced" }] }) }`,
			want: []executor.Message{{Role: "user", Content: "replaced"}},
		},
		"async resolve empty replaces": {
			src:  `async function Create(ctx, messages) { await 0; return { messages: [] } }`,
			want: []executor.Message{},
		},
		"async null keeps": {
			src:  `async function Create(ctx, messages) { return null }`,
			want: convo,
		},
		"resolved bad shape is an error": {
			src:     `async function Create() { return 42 }`,
			wantErr: "Create returned a number", wantIs: hooks.ErrRejected,
		},
		"never settles": {
			src:     `function Create() { return new Promise(() => {}) }`,
			wantErr: "never settled", wantIs: jsapi.ErrPromisePending,
		},
	}
	for name, tc := range cases {
		for lang, h := range compileBoth(t, tc.src) {
			t.Run(name+"/"+lang, func(t *testing.T) {
				got, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, convo)
				if tc.wantErr != "" {
					require.Error(t, err)
					assert.ErrorContains(t, err, tc.wantErr)
					assert.ErrorIs(t, err, tc.wantIs)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
			})
		}
	}
}

// An async Next's replacement applies; its rejection is logged and keeps
// the response, as a throw does.
func TestAsyncNext(t *testing.T) {
	completion := &executor.Completion{Content: "the answer", FinishReason: executor.FinishStop}
	cases := map[string]struct {
		src     string
		want    *executor.Completion
		wantLog string
	}{
		"async replacement applies": {
			src:  `async function Next(ctx, payload) { await null; return { content: payload.completion.content.toUpperCase() } }`,
			want: &executor.Completion{Content: "THE ANSWER", FinishReason: executor.FinishStop},
		},
		"async rejection is logged": {
			src:  `async function Next() { throw new Error("next broke late") }`,
			want: completion, wantLog: "next broke late",
		},
	}
	for name, tc := range cases {
		for lang, h := range compileBoth(t, tc.src) {
			t.Run(name+"/"+lang, func(t *testing.T) {
				logger, out := logSink(hclog.Debug)
				got, err := hooks.RunNext(context.Background(), h, &hooks.Context{Logger: logger}, completion, nil)
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				if tc.wantLog != "" {
					assert.Contains(t, out.String(), tc.wantLog)
				}
			})
		}
	}
}

// Awaiting ctx.sandbox calls works (they are synchronous Go), and a loop
// in the async continuation is stopped by the hook budget like any other.
func TestAsyncSandboxAndBudget(t *testing.T) {
	src := `async function Create(ctx, messages) {
  await ctx.sandbox.WriteFile("a.txt", "from async");
  const text = await ctx.sandbox.ReadFile("a.txt");
  return { messages: [{ role: "user", content: text }] };
}`
	h, err := jsapi.Compile("src/index.js", []byte(src), testOptions())
	require.NoError(t, err)
	sb := executortest.NewSandbox(t)
	got, err := hooks.RunCreate(context.Background(), h, &hooks.Context{Sandbox: sb}, convo)
	require.NoError(t, err)
	assert.Equal(t, []executor.Message{{Role: "user", Content: "from async"}}, got)

	loop := `async function Create() { await null; for (;;) {} }`
	h, err = jsapi.Compile("src/index.js", []byte(loop), jsapi.Options{Timeout: 200e6})
	require.NoError(t, err)
	_, err = hooks.RunCreate(context.Background(), h, &hooks.Context{}, convo)
	require.Error(t, err)
	assert.ErrorIs(t, err, executor.ErrTimeout, "the budget, not a hang, ends the async loop")
}
