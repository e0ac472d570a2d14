package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// panickySandbox is a sandbox whose ReadFile panics with a plain value
// (not a runtime.Error), as a buggy executor might.
type panickySandbox struct{ executor.Sandbox }

// ReadFile panics.
func (panickySandbox) ReadFile(context.Context, string) ([]byte, error) { panic("executor bug") }

// TestCallbackPanicsAreRecovered: a Go function the script calls that
// panics (a gateway callback, a buggy sandbox) ends in an error, never in
// a crashed gateway, and the hooks serve the next request.
func TestCallbackPanicsAreRecovered(t *testing.T) {
	h, err := jsapi.Compile("src/index.js", []byte(`function Create(ctx) {
  if (ctx.sandbox) return { messages: [{ role: "user", content: ctx.sandbox.ReadFile("a.txt") }] };
  try { ctx.SendStream({ type: "x" }) } catch (e) { return { messages: [{ role: "user", content: "caught: " + e.message }] } }
}`), testOptions())
	require.NoError(t, err)

	t.Run("runtime error in a callback is catchable", func(t *testing.T) {
		hc := &hooks.Context{Emit: func(executor.Event) error {
			var none []error
			return none[len(none)] // index out of range: a runtime.Error
		}}
		res, err := h.Create(context.Background(), hc, nil)
		require.NoError(t, err)
		assert.Equal(t, "caught: ctx.SendStream: internal error: runtime error: index out of range [0] with length 0", res.Messages[0].Content)
	})
	t.Run("other panic ends the hook with an error", func(t *testing.T) {
		_, err := h.Create(context.Background(), &hooks.Context{Sandbox: panickySandbox{executortest.NewSandbox(t)}}, nil)
		var he *hooks.HookError
		require.ErrorAs(t, err, &he)
		assert.Equal(t, "internal error while running the hook: executor bug", he.Message)
	})
	res, err := h.Create(context.Background(), &hooks.Context{}, nil)
	require.NoError(t, err, "the hooks still serve requests")
	assert.Nil(t, res)
}

// TestCallerCancellationStopsTheHook: when the request's context ends
// (the client went away), the script and its pending ctx.sandbox call stop
// at once, long before the budget, with the caller's cause.
func TestCallerCancellationStopsTheHook(t *testing.T) {
	sb := executortest.NewSandbox(t)
	sb.ExecFunc = func(ctx context.Context, _ *executor.Cmd) (executor.ExecResult, error) {
		<-ctx.Done()
		return executor.ExecResult{}, ctx.Err()
	}
	cases := map[string]string{
		"script loop":  `for (;;) {}`,
		"sandbox call": `ctx.sandbox.Exec(["sleep", "3600"])`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			h, err := jsapi.Compile("src/index.js", []byte("function Create(ctx) { "+body+" }"), jsapi.Options{Timeout: time.Minute})
			require.NoError(t, err)
			gone := errors.New("client went away")
			ctx, cancel := context.WithCancelCause(context.Background())
			probe := startLagProbe()
			time.AfterFunc(50*time.Millisecond, func() { cancel(gone) })
			start := time.Now()
			_, err = h.Create(ctx, &hooks.Context{Sandbox: sb}, nil)
			elapsed := time.Since(start)
			slack, lag := overshoot(probe, 0)
			t.Logf("worst lag %v, overshoot allowed %v; ended after %v: %v", lag, slack, elapsed, err)
			// What stopped it is the caller's cause, not the budget of a
			// minute; and it stopped soon after the cancel.
			assert.ErrorIs(t, err, gone)
			assert.NotErrorIs(t, err, executor.ErrTimeout)
			assert.Less(t, elapsed-50*time.Millisecond, slack)
		})
	}
}

// TestConcurrentInvocations: one compiled Hooks serves many requests at
// once (run with -race); each invocation has its own runtime, so globals
// set by one are never seen by another, and every request sees its own
// ids, files and memory.
func TestConcurrentInvocations(t *testing.T) {
	h, err := jsapi.Compile("src/index.ts", []byte(`let seen: number = 0;
function Create(ctx: any): null {
  seen++;
  (globalThis as any).count = ((globalThis as any).count || 0) + 1;
  ctx.sandbox.WriteFile(ctx.chat_id + ".txt", ctx.chat_id);
  ctx.memory.context.Set("seen", [seen, (globalThis as any).count]);
  ctx.SendStream({ type: "text", props: { chat: ctx.chat_id } });
  return null;
}
function Next(ctx: any): { content: string } {
  return { content: ctx.sandbox.ReadFile(ctx.chat_id + ".txt") + ":" + JSON.stringify(ctx.memory.context.Get("seen")) };
}`), jsapi.Options{Timeout: backstop}) // isolation, not speed: 8 at once on a loaded 2-core machine take seconds each
	require.NoError(t, err)
	sb := executortest.NewSandbox(t)
	const workers, rounds = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				chat := fmt.Sprintf("w%d-r%d", w, r)
				var events []executor.Event
				hc := &hooks.Context{ChatID: chat, Sandbox: sb, Emit: func(e executor.Event) error { events = append(events, e); return nil }}
				if _, err := h.Create(context.Background(), hc, nil); err != nil {
					errs <- err
					continue
				}
				res, err := h.Next(context.Background(), hc, hooks.NextPayload{})
				switch {
				case err != nil:
					errs <- err
				case res.Content != chat+":[1,1]":
					errs <- fmt.Errorf("%s: got %q", chat, res.Content)
				case len(events) != 1 || events[0].UI.Props["chat"] != chat:
					errs <- fmt.Errorf("%s: events %+v", chat, events)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHostileNextLoopKeepsTheResponse: a Next hook that never returns is
// stopped at its budget, its error is logged, and the request still
// answers with the agent's completion.
func TestHostileNextLoopKeepsTheResponse(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang.name, func(t *testing.T) {
			h, err := jsapi.Compile(lang.file, []byte("function Next(ctx, payload) { for (;;) {} }"), jsapi.Options{Timeout: hostileBudget})
			require.NoError(t, err)
			logger, out := logSink(hclog.Debug)
			completion := &executor.Completion{Content: "the answer", FinishReason: executor.FinishStop}
			probe := startLagProbe()
			start := time.Now()
			got, err := hooks.RunNext(context.Background(), h, &hooks.Context{Logger: logger}, completion, nil)
			elapsed := time.Since(start)
			slack, lag := overshoot(probe, 0)
			t.Logf("worst lag %v, overshoot allowed %v; ended after %v", lag, slack, elapsed)
			require.NoError(t, err)
			assert.Equal(t, completion, got)
			assert.Less(t, elapsed-hostileBudget, slack)
			assert.Contains(t, out.String(), "Next hook ran past its time budget of 500ms")
		})
	}
}

// TestHostileAbandonedMatchEndsOnItsOwn: a catastrophic match that the
// budget's interrupt cannot stop is abandoned; while it runs, MaxRunaway
// refuses new invocations of the same hooks with ErrRunaway, and once the
// match's own timeout ends it, the hooks serve requests again.
func TestHostileAbandonedMatchEndsOnItsOwn(t *testing.T) {
	h, err := jsapi.Compile("src/index.js", []byte(`function Create(ctx, messages) {
  if (messages.length) return null;
  for (;;) /^(a+)+\1$/.test("a".repeat(40) + "b");
}`), jsapi.Options{Timeout: 300 * time.Millisecond, MaxRunaway: 1})
	require.NoError(t, err)
	healthy := []executor.Message{{Role: "user", Content: "hi"}}
	abandoned := false
	for range 10 {
		_, err = h.Create(context.Background(), &hooks.Context{}, nil)
		require.ErrorIs(t, err, executor.ErrTimeout)
		if abandoned = strings.Contains(err.Error(), "abandoned"); abandoned {
			break
		}
	}
	require.True(t, abandoned, "the interrupt landed between matches ten times in a row")
	_, err = h.Create(context.Background(), &hooks.Context{}, healthy)
	if err != nil {
		assert.ErrorIs(t, err, jsapi.ErrRunaway, "while the match runs on, new invocations are refused")
	}
	assert.Eventually(t, func() bool {
		_, err := h.Create(context.Background(), &hooks.Context{}, healthy)
		return err == nil
	}, time.Second, 10*time.Millisecond, "the abandoned match ends within its own timeout")
}
