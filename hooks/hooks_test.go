package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var conversation = []executor.Message{{Role: "user", Content: "hi"}}

func done() *executor.Completion {
	return &executor.Completion{Content: "answer", FinishReason: executor.FinishStop, Usage: executor.Usage{InputTokens: 7, OutputTokens: 3}}
}

// Rule 1: Create and Next get the same *Context, so what Create stores in
// the request memory Next reads.
func TestRule1_CreateAndNextShareTheContext(t *testing.T) {
	var seen []*hooks.Context
	h := hooks.Funcs{
		CreateFunc: func(_ context.Context, hc *hooks.Context, _ []executor.Message) (*hooks.CreateResult, error) {
			seen = append(seen, hc)
			req, _ := hc.Stores()
			return nil, req.Set("k", []byte(`1`))
		},
		NextFunc: func(_ context.Context, hc *hooks.Context, _ hooks.NextPayload) (*hooks.NextResult, error) {
			seen = append(seen, hc)
			req, _ := hc.Stores()
			v, ok := req.Get("k")
			if !ok || string(v) != "1" {
				return nil, errors.New("request memory lost between Create and Next")
			}
			return &hooks.NextResult{Content: "shared"}, nil
		},
	}
	hc := &hooks.Context{}
	_, err := hooks.RunCreate(context.Background(), h, hc, conversation)
	require.NoError(t, err)
	got, err := hooks.RunNext(context.Background(), h, hc, done(), nil)
	require.NoError(t, err)
	assert.Equal(t, "shared", got.Content)
	require.Len(t, seen, 2)
	assert.Same(t, seen[0], seen[1])
}

// Rule 2: an absent hook (or no hooks at all) keeps the conversation and
// the response.
func TestRule2_AbsentHooksAreNoOps(t *testing.T) {
	for name, h := range map[string]hooks.Hooks{"nil": nil, "empty": hooks.Funcs{}} {
		t.Run(name, func(t *testing.T) {
			msgs, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, conversation)
			require.NoError(t, err)
			assert.Equal(t, conversation, msgs)
			runErr := errors.New("agent failed")
			got, err := hooks.RunNext(context.Background(), h, &hooks.Context{}, done(), runErr)
			assert.Equal(t, runErr, err)
			assert.Equal(t, done(), got)
		})
	}
}

// Rule 3: Create's Messages replace the conversation; nil keeps it.
func TestRule3_CreateReplacesOrKeepsMessages(t *testing.T) {
	replaced := []executor.Message{{Role: "user", Content: "rewritten"}}
	cases := map[string]struct {
		res  *hooks.CreateResult
		want []executor.Message
	}{
		"nil result keeps":   {nil, conversation},
		"nil messages keeps": {&hooks.CreateResult{}, conversation},
		"messages replace":   {&hooks.CreateResult{Messages: replaced}, replaced},
		"empty replaces":     {&hooks.CreateResult{Messages: []executor.Message{}}, []executor.Message{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := hooks.Funcs{CreateFunc: func(context.Context, *hooks.Context, []executor.Message) (*hooks.CreateResult, error) {
				return tc.res, nil
			}}
			got, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, conversation)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Rule 4: an error from Create rejects the request with a typed error that
// carries the hook's own message and the cause.
func TestRule4_CreateErrorRejects(t *testing.T) {
	thrown := &hooks.HookError{Hook: "Create", Message: "Node.js is required", Position: "src/index.ts:20:11"}
	h := hooks.Funcs{CreateFunc: func(context.Context, *hooks.Context, []executor.Message) (*hooks.CreateResult, error) {
		return nil, thrown
	}}
	_, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, conversation)
	require.Error(t, err)
	assert.ErrorIs(t, err, hooks.ErrRejected)
	var rej *hooks.RejectedError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, "Node.js is required", rej.Message)
	var he *hooks.HookError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "src/index.ts:20:11", he.Position)
	assert.Equal(t, "request rejected by the Create hook: Node.js is required", err.Error())
}

// Rule 5: Next's nil result keeps the response, a result replaces the
// content (and finish reason) but keeps usage, and rescues a failed run.
func TestRule5_NextKeepsOrReplaces(t *testing.T) {
	failed := &executor.Completion{Content: "partial", FinishReason: executor.FinishError, IsError: true, Errors: []string{"boom"}, Usage: executor.Usage{InputTokens: 5}}
	cases := map[string]struct {
		res        *hooks.NextResult
		completion *executor.Completion
		runErr     error
		want       *executor.Completion
		wantErr    bool
	}{
		"nil keeps":         {nil, done(), nil, done(), false},
		"nil keeps failure": {nil, nil, errors.New("agent failed"), nil, true},
		"replace content": {&hooks.NextResult{Content: "new"}, done(), nil,
			&executor.Completion{Content: "new", FinishReason: executor.FinishStop, Usage: executor.Usage{InputTokens: 7, OutputTokens: 3}}, false},
		"replace finish reason": {&hooks.NextResult{Content: "new", FinishReason: executor.FinishMaxTurns}, done(), nil,
			&executor.Completion{Content: "new", FinishReason: executor.FinishMaxTurns, Usage: executor.Usage{InputTokens: 7, OutputTokens: 3}}, false},
		"replace rescues failure": {&hooks.NextResult{Content: "sorry"}, failed, errors.New("agent failed"),
			&executor.Completion{Content: "sorry", FinishReason: executor.FinishStop, Usage: executor.Usage{InputTokens: 5}}, false},
		"replace without completion": {&hooks.NextResult{Content: "sorry"}, nil, errors.New("agent failed"),
			&executor.Completion{Content: "sorry", FinishReason: executor.FinishStop}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var payload hooks.NextPayload
			h := hooks.Funcs{NextFunc: func(_ context.Context, _ *hooks.Context, p hooks.NextPayload) (*hooks.NextResult, error) {
				payload = p
				return tc.res, nil
			}}
			got, err := hooks.RunNext(context.Background(), h, &hooks.Context{}, tc.completion, tc.runErr)
			if tc.wantErr {
				assert.Equal(t, tc.runErr, err)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.completion, payload.Completion)
			if tc.runErr != nil {
				assert.Equal(t, tc.runErr.Error(), payload.Error)
			}
		})
	}
}

// Rule 6: an error from Next is logged and the default response stands.
func TestRule6_NextErrorIsLoggedNotFatal(t *testing.T) {
	var logs strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	h := hooks.Funcs{NextFunc: func(context.Context, *hooks.Context, hooks.NextPayload) (*hooks.NextResult, error) {
		return nil, errors.New("next exploded")
	}}
	got, err := hooks.RunNext(context.Background(), h, &hooks.Context{Logger: logger}, done(), nil)
	require.NoError(t, err)
	assert.Equal(t, done(), got)
	assert.Contains(t, logs.String(), "next exploded")
}

// Rule 7: a hook that passed its budget fails with an error wrapping
// executor.ErrTimeout: Create rejects, Next is logged.
func TestRule7_BudgetErrorsFollowTheErrorRules(t *testing.T) {
	timeout := &hooks.HookError{Hook: "Create", Message: "time budget passed", Err: fmt.Errorf("hook_timeout 1s: %w", executor.ErrTimeout)}
	h := hooks.Funcs{
		CreateFunc: func(context.Context, *hooks.Context, []executor.Message) (*hooks.CreateResult, error) {
			return nil, timeout
		},
		NextFunc: func(context.Context, *hooks.Context, hooks.NextPayload) (*hooks.NextResult, error) {
			return nil, timeout
		},
	}
	_, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, conversation)
	assert.ErrorIs(t, err, hooks.ErrRejected)
	assert.ErrorIs(t, err, executor.ErrTimeout)
	got, err := hooks.RunNext(context.Background(), h, &hooks.Context{}, done(), nil)
	assert.NoError(t, err)
	assert.Equal(t, done(), got)
}

// Rule 8: chat memory survives across requests of one chat and is not
// shared with other chats; request memory is per request.
func TestRule8_OnlyChatMemorySurvivesRequests(t *testing.T) {
	chats := hooks.NewChatMemory(10, 0, 0)
	first := &hooks.Context{ChatMemory: chats.For("u", "c1")}
	req, chat := first.Stores()
	require.NoError(t, req.Set("r", []byte(`"x"`)))
	require.NoError(t, chat.Set("c", []byte(`{"n":1}`)))

	second := &hooks.Context{ChatMemory: chats.For("u", "c1")}
	req2, chat2 := second.Stores()
	_, ok := req2.Get("r")
	assert.False(t, ok, "request memory leaked into the next request")
	v, ok := chat2.Get("c")
	assert.True(t, ok)
	assert.JSONEq(t, `{"n":1}`, string(v))

	_, ok = chats.For("u", "c2").Get("c")
	assert.False(t, ok, "chat memory leaked into another chat")
}
