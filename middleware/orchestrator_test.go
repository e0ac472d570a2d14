package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/internal/jsonl"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

func TestPassThroughIsUnchanged(t *testing.T) {
	for name, assistant := range map[string]string{
		"unknown assistant":         "gpt-4o",
		"assistant without sandbox": "qa",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			req := &middleware.Request{AssistantID: assistant, Model: assistant, Messages: []executor.Message{{Role: "user", Content: "hi"}}}
			want := &middleware.Response{Content: "from next", FinishReason: "stop"}
			var gotReq *middleware.Request
			var gotAssistant *middleware.Assistant
			e.next = middleware.HandlerFunc(func(ctx context.Context, r *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
				gotReq, gotAssistant = r, middleware.AssistantFrom(ctx)
				return want, emit(executor.Event{Kind: executor.EventText, Text: "from next"})
			})
			var c collector
			resp, err := e.h.Handle(context.Background(), req, c.emit)
			require.NoError(t, err)
			assert.Same(t, want, resp, "the next handler's response is returned as is")
			assert.Same(t, req, gotReq, "the request reaches next unchanged")
			assert.Equal(t, []executor.Event{{Kind: executor.EventText, Text: "from next"}}, c.get(), "next's events reach the caller")
			assert.Empty(t, e.ex.Sandboxes(), "no sandbox for a pass-through request")
			assert.Empty(t, e.tr.get())
			if assistant == "qa" {
				require.NotNil(t, gotAssistant)
				assert.Equal(t, "qa", gotAssistant.ID)
			} else {
				assert.Nil(t, gotAssistant)
			}
		})
	}
}

func TestLifecycleRunsPhasesInOrder(t *testing.T) {
	var hookMessages []executor.Message
	h := hooks.Funcs{
		CreateFunc: func(ctx context.Context, hc *hooks.Context, msgs []executor.Message) (*hooks.CreateResult, error) {
			hookMessages = msgs
			require.NotNil(t, hc.Sandbox, "the Create hook sees the sandbox")
			data, err := hc.Sandbox.ReadFile(ctx, ".claude/skills/review/SKILL.md")
			require.NoError(t, err, "the assistant's files are in place before the Create hook")
			assert.Contains(t, string(data), "name: review")
			require.NoError(t, hc.Emit(executor.Event{Kind: executor.EventUI, UI: &executor.UIMessage{ID: "1", Action: "send"}}))
			out := append([]executor.Message{{Role: "system", Content: "from hook"}}, msgs...)
			return &hooks.CreateResult{Messages: out}, nil
		},
		NextFunc: func(ctx context.Context, hc *hooks.Context, p hooks.NextPayload) (*hooks.NextResult, error) {
			assert.Equal(t, "Hello, world.", p.Completion.Content)
			assert.Empty(t, p.Error)
			return nil, nil
		},
	}
	e := newEnv(t, withHooks(h), withRouter())
	e.coder.Sandbox.Spec.CPUs = 1.5
	e.setScript(scripted.Text(executor.Usage{InputTokens: 10, OutputTokens: 5}, "Hello", ", world."))

	var c collector
	req := request("1")
	resp, err := e.h.Handle(context.Background(), req, c.emit)
	require.NoError(t, err)

	assert.Equal(t, []string{
		"create", "route.open", "write .claude/skills/review/SKILL.md", "hook.create",
		"invocation", "write .scripted/run.json", "exec scripted-agent", "parse",
		"hook.next", "route.close", "close",
	}, sortParseExec(e.tr.get()))
	assert.Equal(t, "Hello, world.", resp.Content)
	assert.Equal(t, c.text(), resp.Content, "streamed text == content")
	assert.False(t, resp.Replaced)
	assert.Equal(t, executor.FinishStop, resp.FinishReason)
	assert.Equal(t, executor.Usage{InputTokens: 1000, OutputTokens: 200}, resp.Usage, "usage is the model route's metered figure")
	require.NotNil(t, resp.Completion)
	assert.Equal(t, executor.Usage{InputTokens: 10, OutputTokens: 5}, resp.Completion.Usage, "the CLI's own figure stays beside it")

	kinds := []string{}
	for _, ev := range c.get() {
		kinds = append(kinds, string(ev.Kind)+":"+ev.Text)
	}
	assert.Equal(t, []string{"sandbox:ready", "ui:", "text:Hello", "text:, world."}, kinds, "the teardown comes after the response: its closed event reaches nobody")

	runs := e.runner.Requests()
	require.Len(t, runs, 1)
	assert.Equal(t, hookMessages, req.Messages, "the hook got the conversation")
	assert.Equal(t, "from hook", runs[0].Messages[0].Content, "the Create hook's messages reach the runner")
	assert.Equal(t, "be brief", runs[0].SystemPrompt)
	assert.Equal(t, executor.ContainerWorkdir, runs[0].Workdir)
	assert.Equal(t, middleware.DefaultHome, runs[0].Home)
	assert.Equal(t, "http://127.0.0.1:7000", runs[0].ModelBaseURL)
	assert.Equal(t, "per-request-token", runs[0].APIKey)
	assert.Equal(t, 1.5, runs[0].CPUs, "the runner knows the sandbox's CPU quota")
	assert.Len(t, req.Messages, 1, "the caller's request is not modified")

	sbs := e.ex.Sandboxes()
	require.Len(t, sbs, 1)
	spec := sbs[0].Spec()
	assert.Equal(t, [3]string{"alice", "1", "coder"}, [3]string{spec.UserID, spec.ChatID, spec.AssistantID})
	assert.True(t, sbs[0].Closed())
	calls := sbs[0].Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, []string{"scripted-agent", "--model", "claude-test"}, calls[0].Args)
	assert.Equal(t, int64(64<<20), calls[0].MaxOutput, "the sandbox's output cap reaches the command")
	assert.Positive(t, calls[0].Timeout, "the command is bounded by what is left of the sandbox timeout")
	assert.LessOrEqual(t, calls[0].Timeout, time.Minute)
	assert.JSONEq(t, `[{"role":"system","content":"from hook"},{"role":"user","content":"write hello.txt"}]`, string(calls[0].Stdin))

	tm := resp.Timings
	for name, d := range map[string]time.Duration{"container": tm.ContainerStart, "workspace": tm.Workspace,
		"create hook": tm.CreateHook, "agent": tm.Agent, "next hook": tm.NextHook} {
		assert.Positive(t, d, name)
	}
	assert.Zero(t, tm.Teardown, "the response does not wait for the teardown")
	assert.GreaterOrEqual(t, tm.Total, tm.Lease+tm.ContainerStart+tm.Workspace+tm.CreateHook+tm.Agent+tm.NextHook)
}

// sortParseExec puts "exec" before "parse": they run concurrently, so
// their relative order is not part of the contract.
func sortParseExec(log []string) []string {
	for i := 0; i+1 < len(log); i++ {
		if log[i] == "parse" && log[i+1] == "exec scripted-agent" {
			log[i], log[i+1] = log[i+1], log[i]
		}
	}
	return log
}

func TestTeardownOnClientDisconnect(t *testing.T) {
	for name, disconnect := range map[string]func(cancel context.CancelFunc) error{
		"context canceled": func(cancel context.CancelFunc) error { cancel(); return nil },
		"emit fails":       func(context.CancelFunc) error { return errors.New("write: broken pipe") },
	} {
		t.Run(name, func(t *testing.T) {
			var logs testenv.SyncBuffer
			e := newEnv(t, func(_ *env, o *middleware.Options) {
				o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
			})
			s := scripted.Text(executor.Usage{}, "partial", "never sent")
			s.Lines = s.Lines[:1]
			s.Block = true
			e.setScript(s)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			emit := func(ev executor.Event) error {
				if ev.Kind == executor.EventText {
					return disconnect(cancel)
				}
				return nil
			}
			start := time.Now()
			resp, err := e.h.Handle(ctx, request("1"), emit)
			require.Error(t, err)
			assert.Nil(t, resp)
			assert.Equal(t, middleware.KindCanceled, middleware.KindOf(err), "%v", err)
			assert.Less(t, time.Since(start), 5*time.Second, "the blocked agent was stopped")
			if name == "emit fails" {
				assert.Equal(t, 1, strings.Count(err.Error(), "broken pipe"), "the error chain never repeats itself: %v", err)
			}
			// One line for the outcome, at INFO, with the phase it
			// reached; no WARN about an agent that merely lost its client.
			out := logs.String()
			assert.NotContains(t, out, "[WARN]", out)
			assert.NotContains(t, out, "[ERROR]", out)
			assert.Equal(t, 1, strings.Count(out, "sandboxed request"), out)
			assert.Regexp(t, `\[INFO\]  sandboxed request canceled: .* phase=agent `, out)

			sbs := e.ex.Sandboxes()
			require.Len(t, sbs, 1)
			assert.True(t, sbs[0].Closed(), "the sandbox is removed")
			e.ex.mu.Lock()
			assert.Equal(t, []error{nil}, e.ex.closeCtxErr, "teardown runs on a context the client cannot cancel")
			e.ex.mu.Unlock()

			// The lease is released: the chat takes the next request at once.
			e.setScript(scripted.Text(executor.Usage{}, "ok"))
			resp, err = e.h.Handle(context.Background(), request("1"), nil)
			require.NoError(t, err)
			assert.Equal(t, "ok", resp.Content)
		})
	}
}

func TestErrorsAreTyped(t *testing.T) {
	rejecting := hooks.Funcs{CreateFunc: func(context.Context, *hooks.Context, []executor.Message) (*hooks.CreateResult, error) {
		return nil, &hooks.HookError{Hook: "Create", Message: "Node.js is required", Position: "src/index.ts:20:11"}
	}}
	cases := map[string]struct {
		opts   []envOption
		script scripted.Script
		req    func(*middleware.Request)
		kind   middleware.Kind
		param  string
		msg    string
		// ran: a sandbox was created (and must be closed).
		ran bool
	}{
		"missing user id":    {req: func(r *middleware.Request) { r.UserID = "" }, kind: middleware.KindBadRequest, param: "user", msg: "valid user id"},
		"chat id escapes":    {req: func(r *middleware.Request) { r.ChatID = "../x" }, kind: middleware.KindBadRequest, param: "chat", msg: "valid chat id"},
		"empty conversation": {req: func(r *middleware.Request) { r.Messages = nil }, kind: middleware.KindBadRequest, param: "messages", msg: "empty"},
		"bad role":           {req: func(r *middleware.Request) { r.Messages[0].Role = "tool" }, kind: middleware.KindBadRequest, param: "messages[0].role"},
		"last message not from user": {req: func(r *middleware.Request) {
			r.Messages = append(r.Messages, executor.Message{Role: "assistant", Content: "x"})
		}, kind: middleware.KindBadRequest, param: "messages"},
		"empty user message": {req: func(r *middleware.Request) {
			r.Messages = append(r.Messages, executor.Message{Role: "assistant", Content: "x"}, executor.Message{Role: "user", Content: " \n\t"})
		}, kind: middleware.KindBadRequest, param: "messages[2].content", msg: "has no text"},
		"executor busy":       {opts: []envOption{withCreateErr(executor.ErrBusy)}, kind: middleware.KindBusy},
		"sandbox start fails": {opts: []envOption{withCreateErr(errors.New("docker: no such image"))}, kind: middleware.KindSandboxStart},
		"model route fails": {opts: []envOption{withRouter(), func(e *env, _ *middleware.Options) { e.router.openErr = errors.New("listen: address in use") }},
			kind: middleware.KindSandboxStart, ran: true},
		"hook rejects": {opts: []envOption{withHooks(rejecting)}, kind: middleware.KindHookRejected, msg: "Node.js is required", ran: true},
		"runner refuses the arguments": {opts: []envOption{func(e *env, _ *middleware.Options) { e.runner.InvocationErr = errors.New("max_turns must be > 0") }},
			kind: middleware.KindConfig, msg: "max_turns must be > 0", ran: true},
		"stream without result": {script: scripted.Script{Lines: []scripted.Line{{Event: &executor.Event{Kind: executor.EventText, Text: "x"}}}},
			kind: middleware.KindAgent, msg: "without a final result", ran: true},
		"agent exits non-zero": {script: scripted.Script{Exit: 2}, kind: middleware.KindAgent, msg: "exit code 2", ran: true},
		"agent out of memory":  {script: scripted.Script{Exit: 137}, kind: middleware.KindAgent, msg: "exit code 137", ran: true},
		"agent reports an error": {script: scripted.Script{Lines: []scripted.Line{{Result: &executor.Completion{
			IsError: true, FinishReason: executor.FinishError, Errors: []string{"API Error: 401 invalid key"}, APIErrorStatus: 401}}}},
			kind: middleware.KindAgent, msg: "API Error: 401 invalid key (the model API answered 401)", ran: true},
		"exec times out":        {script: scripted.Script{Err: errors.New("exec: " + executor.ErrTimeout.Error()), Exit: -1}, kind: middleware.KindAgent, ran: true},
		"exec timeout sentinel": {script: scripted.Script{Err: executor.ErrTimeout, Exit: -1}, kind: middleware.KindTimeout, msg: "time limit", ran: true},
		"stall watchdog fires": {opts: []envOption{withStall(100 * time.Millisecond)},
			script: scripted.Script{Lines: []scripted.Line{{Event: &executor.Event{Kind: executor.EventText, Text: "x"}}}, Block: true},
			kind:   middleware.KindTimeout, msg: "stopped producing output", ran: true},
		"stall error from the runner": {script: scripted.Script{Err: &jsonl.StallError{Timeout: time.Second, Idle: time.Second}, Exit: -1}, kind: middleware.KindTimeout, msg: "stopped producing output", ran: true},
		"sandbox timeout": {opts: []envOption{withSpec(func(s *executor.Spec) { s.Timeout = 50 * time.Millisecond })},
			script: scripted.Script{Block: true}, kind: middleware.KindTimeout, msg: "sandbox timeout of 50ms", ran: true},
		"output too large": {script: scripted.Script{Err: executor.ErrOutputTooLarge, Exit: -1}, kind: middleware.KindAgent, msg: "more output", ran: true},
		"container went away": {script: scripted.Script{Err: fmt.Errorf("exec: %w", executor.ErrSandboxGone), Exit: -1},
			kind: middleware.KindSandboxGone, msg: "container went away during the run", ran: true},
		"workspace over quota": {script: scripted.Script{Err: fmt.Errorf("exec: %w", executor.ErrNoSpace), Exit: -1},
			kind: middleware.KindAgent, msg: "past its disk or inode quota", ran: true},
		"no space to start": {opts: []envOption{withCreateErr(fmt.Errorf("docker: %w", executor.ErrNoSpace))},
			kind: middleware.KindSandboxStart, msg: "over its disk or inode quota"},
		"runtime does not answer": {opts: []envOption{withCreateErr(fmt.Errorf("docker: %w", executor.ErrUnavailable))},
			kind: middleware.KindUnavailable, msg: "container runtime does not answer"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			e.setScript(tc.script)
			req := request("1")
			if tc.req != nil {
				tc.req(req)
			}
			resp, err := e.h.Handle(context.Background(), req, nil)
			require.Error(t, err)
			assert.Nil(t, resp)
			var me *middleware.Error
			require.ErrorAs(t, err, &me)
			assert.Equal(t, tc.kind, me.Kind, "%v", err)
			assert.ErrorIs(t, err, &middleware.Error{Kind: tc.kind})
			assert.Equal(t, tc.kind == middleware.KindBusy || tc.kind == middleware.KindUnavailable, me.Retry, "only busy and unavailable (nothing ran) are retry-safe here")
			assert.Equal(t, tc.param, me.Param)
			assert.Contains(t, me.Message, tc.msg)
			sbs := e.ex.Sandboxes()
			if tc.ran {
				require.Len(t, sbs, 1)
				assert.True(t, sbs[0].Closed(), "the sandbox is removed after a failure")
			} else {
				assert.Empty(t, sbs)
			}
		})
	}
}

func withStall(d time.Duration) envOption {
	return func(e *env, _ *middleware.Options) { e.coder.Sandbox.StallTimeout = d }
}

func withCreateErr(err error) envOption {
	return func(e *env, _ *middleware.Options) { e.ex.CreateErr = err }
}

func TestBusyChat(t *testing.T) {
	for name, tc := range map[string]struct {
		wait     time.Duration
		wantKind middleware.Kind
	}{
		"no lease wait fails at once":    {wait: 0, wantKind: middleware.KindBusy},
		"lease wait outlasts the holder": {wait: 10 * time.Second, wantKind: ""},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withSpec(func(s *executor.Spec) { s.LeaseWait = tc.wait }))
			s := scripted.Text(executor.Usage{}, "first")
			s.Block = true
			e.setScript(s)
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			var once sync.Once
			firstDone := make(chan error, 1)
			go func() {
				_, err := e.h.Handle(ctx, request("1"), func(ev executor.Event) error {
					if ev.Kind == executor.EventText {
						once.Do(func() { close(started) })
					}
					return nil
				})
				firstDone <- err
			}()
			<-started
			e.setScript(scripted.Text(executor.Usage{}, "second"))
			if tc.wait > 0 {
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			resp, err := e.h.Handle(context.Background(), request("1"), nil)
			cancel()
			assert.Equal(t, tc.wantKind, middleware.KindOf(err), "%v", err)
			if tc.wantKind == "" {
				require.NoError(t, err)
				assert.Equal(t, "second", resp.Content)
				assert.GreaterOrEqual(t, resp.Timings.Lease, 50*time.Millisecond, "the lease wait is measured")
			} else {
				assert.True(t, middleware.AsError(err).Retry)
			}
			assert.Equal(t, middleware.KindCanceled, middleware.KindOf(<-firstDone))
			// Another chat of the same user is never blocked.
			e.setScript(scripted.Text(executor.Usage{}, "other"))
			_, err = e.h.Handle(context.Background(), request("2"), nil)
			assert.NoError(t, err)
		})
	}
}

func TestNextHook(t *testing.T) {
	for name, tc := range map[string]struct {
		script   scripted.Script
		next     func(hooks.NextPayload) (*hooks.NextResult, error)
		content  string
		replaced bool
		kind     middleware.Kind
	}{
		"keeps the response": {script: scripted.Text(executor.Usage{}, "answer"),
			next: func(hooks.NextPayload) (*hooks.NextResult, error) { return nil, nil }, content: "answer"},
		"replaces the content": {script: scripted.Text(executor.Usage{}, "answer"),
			next:    func(hooks.NextPayload) (*hooks.NextResult, error) { return &hooks.NextResult{Content: "replaced"}, nil },
			content: "replaced", replaced: true},
		"error keeps the response": {script: scripted.Text(executor.Usage{}, "answer"),
			next: func(hooks.NextPayload) (*hooks.NextResult, error) { return nil, errors.New("boom") }, content: "answer"},
		"answers for a failed agent": {script: scripted.Script{Exit: 1},
			next: func(p hooks.NextPayload) (*hooks.NextResult, error) {
				if p.Error == "" || p.Completion != nil {
					return nil, errors.New("expected an error payload")
				}
				return &hooks.NextResult{Content: "sorry"}, nil
			}, content: "sorry", replaced: true},
		"failed agent stays failed": {script: scripted.Script{Exit: 1},
			next: func(hooks.NextPayload) (*hooks.NextResult, error) { return nil, nil }, kind: middleware.KindAgent},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withHooks(hooks.Funcs{NextFunc: func(_ context.Context, _ *hooks.Context, p hooks.NextPayload) (*hooks.NextResult, error) {
				return tc.next(p)
			}}))
			e.setScript(tc.script)
			var c collector
			resp, err := e.h.Handle(context.Background(), request("1"), c.emit)
			assert.Equal(t, tc.kind, middleware.KindOf(err), "%v", err)
			if tc.kind != "" {
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.content, resp.Content)
			assert.Equal(t, tc.replaced, resp.Replaced)
			assert.Equal(t, !tc.replaced, c.text() == resp.Content)
		})
	}
}

func TestMaxTurnsIsAnAnswer(t *testing.T) {
	e := newEnv(t)
	e.setScript(scripted.Script{Lines: []scripted.Line{
		{Event: &executor.Event{Kind: executor.EventText, Text: "partial"}},
		{Result: &executor.Completion{Content: "partial", IsError: true, FinishReason: executor.FinishMaxTurns, Subtype: "error_max_turns"}},
	}})
	resp, err := e.h.Handle(context.Background(), request("1"), nil)
	require.NoError(t, err)
	assert.Equal(t, executor.FinishMaxTurns, resp.FinishReason)
	assert.Equal(t, "partial", resp.Content)
}

func TestNewCleansUpAfterItself(t *testing.T) {
	okExec := func(tr *tracer, n *int) func(context.Context, hclog.Logger) (executor.Executor, error) {
		return func(context.Context, hclog.Logger) (executor.Executor, error) {
			*n++
			return &tracingExecutor{FakeExecutor: executortestExecutor(t), tr: tr}, nil
		}
	}
	sandboxed := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Runner: "claude", Spec: executor.Spec{Image: "img"}}}
	noImage := &middleware.Assistant{ID: "bare", Sandbox: &middleware.Sandbox{Runner: "scripted"}}
	for name, tc := range map[string]struct {
		assistants []*middleware.Assistant
		runners    int
		routerErr  error
		nilCatalog bool
		wantErr    []string
		// opened: the executor was opened; trace: what was closed.
		opened bool
		trace  []string
	}{
		"nil catalog and no runners": {nilCatalog: true, runners: 0,
			wantErr: []string{"Options.Catalog is nil", "Options.Runners is empty"}},
		"duplicate runners": {runners: 2, wantErr: []string{`two runners are named "scripted"`}},
		"router fails": {runners: 1, routerErr: errors.New("no socket dir"),
			wantErr: []string{"open the model router: no socket dir"}, opened: true, trace: []string{"executor.close"}},
		"catalog names an unknown runner and no image": {runners: 1, assistants: []*middleware.Assistant{sandboxed, noImage},
			wantErr: []string{`assistant "coder": sandbox runner "claude" is not one of [scripted]`, `assistant "bare": sandbox image is empty`},
			opened:  true, trace: []string{"router.close", "executor.close"}},
	} {
		t.Run(name, func(t *testing.T) {
			tr := &tracer{}
			opened := 0
			o := middleware.Options{NewExecutor: okExec(tr, &opened)}
			for range tc.runners {
				o.Runners = append(o.Runners, &scripted.Runner{})
			}
			if !tc.nilCatalog {
				cat, err := middleware.NewCatalog(tc.assistants...)
				require.NoError(t, err)
				o.Catalog = cat
			}
			router := &fakeRouter{tr: tr}
			o.NewModelRouter = func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
				if tc.routerErr != nil {
					return nil, tc.routerErr
				}
				return router, nil
			}
			got, err := middleware.New(context.Background(), o)
			require.Error(t, err)
			assert.Nil(t, got)
			for _, w := range tc.wantErr {
				assert.ErrorContains(t, err, w)
			}
			assert.Equal(t, tc.opened, opened == 1)
			assert.Equal(t, tc.trace, tr.get(), "what New opened is closed, in reverse order")
		})
	}
}

func TestCloseDrainsRunsInFlight(t *testing.T) {
	for name, tc := range map[string]struct {
		block bool
		drain time.Duration
		kind  middleware.Kind
	}{
		"run finishes within the drain": {block: false, drain: 10 * time.Second},
		"run outlasts the drain":        {block: true, drain: 200 * time.Millisecond, kind: middleware.KindUnavailable},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withOptions(func(o *middleware.Options) { o.DrainTimeout = tc.drain }))
			release := make(chan struct{})
			s := scripted.Text(executor.Usage{}, "done")
			e.setScript(s)
			started := make(chan struct{})
			e.ex.OnCreate = func(sb *executortestSandbox) {
				sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
					close(started)
					if tc.block {
						<-ctx.Done()
						return executor.ExecResult{ExitCode: -1}, ctx.Err()
					}
					<-release
					return s.Exec(ctx, cmd)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := e.h.Handle(context.Background(), request("1"), nil)
				done <- err
			}()
			<-started
			closed := make(chan error, 1)
			var closing atomic.Bool
			go func() {
				closing.Store(true)
				closed <- e.o.Close()
			}()
			if !tc.block {
				time.Sleep(50 * time.Millisecond)
				close(release)
			}
			err := <-done
			assert.Equal(t, tc.kind, middleware.KindOf(err), "%v", err)
			require.NoError(t, <-closed)
			assert.True(t, e.ex.Sandboxes()[0].Closed())
			assert.Equal(t, 1, e.ex.closed, "Close closes the executor after the drain")
			_, err = e.h.Handle(context.Background(), request("2"), nil)
			assert.Equal(t, middleware.KindUnavailable, middleware.KindOf(err))
			assert.True(t, middleware.AsError(err).Retry)
			assert.NoError(t, e.o.Close(), "Close twice")
			assert.Equal(t, 1, e.ex.closed)
		})
	}
}

func TestDirectModelSkipsTheRoute(t *testing.T) {
	e := newEnv(t, withRouter(), func(e *env, _ *middleware.Options) {
		e.coder.Sandbox.DirectModel = true
		e.coder.Sandbox.Connector = middleware.Connector{Upstream: "https://api2.cursor.sh", Key: "cur-key"}
	})
	e.setScript(scripted.Text(executor.Usage{InputTokens: 3}, "ok"))
	resp, err := e.h.Handle(context.Background(), request("1"), nil)
	require.NoError(t, err)
	assert.NotContains(t, e.tr.get(), "route.open")
	runs := e.runner.Requests()
	require.Len(t, runs, 1)
	assert.Equal(t, "cur-key", runs[0].APIKey)
	assert.Equal(t, "https://api2.cursor.sh", runs[0].ModelBaseURL)
	assert.Equal(t, executor.Usage{InputTokens: 3}, resp.Usage, "usage is the CLI's report")
}

func TestAgentIgnoringCancellationDoesNotHoldTheRequest(t *testing.T) {
	e := newEnv(t, withOptions(func(o *middleware.Options) { o.TeardownTimeout = 200 * time.Millisecond }))
	release := make(chan struct{})
	defer close(release)
	e.ex.OnCreate = func(sb *executortestSandbox) {
		sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
			_, _ = cmd.Stdout.Write([]byte("not json\n"))
			<-release // ignores ctx, as a broken backend would
			return executor.ExecResult{}, nil
		}
	}
	start := time.Now()
	_, err := e.h.Handle(context.Background(), request("1"), nil)
	assert.Equal(t, middleware.KindAgent, middleware.KindOf(err), "%v", err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.True(t, e.ex.Sandboxes()[0].Closed())
}

func TestAdmissionQueuesThenOverloads(t *testing.T) {
	e := newEnv(t, withOptions(func(o *middleware.Options) {
		o.Admission = middleware.Admission{MaxRuns: 1, MaxQueue: 1, MaxMemoryBytes: -1}
	}))
	s := scripted.Text(executor.Usage{}, "first")
	s.Block = true
	e.setScript(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	firstDone := make(chan error, 1)
	go func() {
		_, err := e.h.Handle(ctx, request("1"), func(ev executor.Event) error {
			if ev.Kind == executor.EventText {
				once.Do(func() { close(started) })
			}
			return nil
		})
		firstDone <- err
	}()
	<-started

	second := request("2")
	second.UserID = "bob"
	var c collector
	secondDone := make(chan error, 1)
	var secondResp *middleware.Response
	go func() {
		var err error
		secondResp, err = e.h.Handle(context.Background(), second, c.emit)
		secondDone <- err
	}()
	require.Eventually(t, func() bool { return e.o.Admission().Waiting == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return len(c.get()) > 0 }, 10*time.Second, time.Millisecond)
	ev := c.get()[0]
	assert.Equal(t, executor.EventSandbox, ev.Kind)
	assert.Equal(t, middleware.SandboxQueued, ev.Text)
	require.NotNil(t, ev.Queue)
	assert.Equal(t, 1, ev.Queue.Position)

	creates := len(slices.DeleteFunc(e.tr.get(), func(s string) bool { return s != "create" }))
	third := request("3")
	third.UserID = "carol"
	_, err := e.h.Handle(context.Background(), third, nil)
	assert.Equal(t, middleware.KindOverloaded, middleware.KindOf(err), "%v", err)
	assert.True(t, middleware.AsError(err).Retry)
	assert.Positive(t, middleware.AsError(err).RetryAfter)
	assert.Equal(t, creates, len(slices.DeleteFunc(e.tr.get(), func(s string) bool { return s != "create" })),
		"an overloaded request starts no sandbox")

	e.setScript(scripted.Text(executor.Usage{}, "second"))
	cancel()
	assert.Equal(t, middleware.KindCanceled, middleware.KindOf(<-firstDone))
	require.NoError(t, <-secondDone)
	assert.Equal(t, "second", secondResp.Content)
	assert.Positive(t, secondResp.Timings.Queue, "the queue wait is measured")
	assert.Equal(t, middleware.AdmissionStats{}, e.o.Admission(), "every slot is back")
}

// gatedEnv is an env whose agents each wait for a token on gate before
// they answer "ok", and which records the user of each sandbox created.
func gatedEnv(t *testing.T, adm middleware.Admission) (e *env, gate chan struct{}, users func() []string) {
	e = newEnv(t, withOptions(func(o *middleware.Options) { o.Admission = adm }))
	gate = make(chan struct{})
	var mu sync.Mutex
	var created []string
	e.ex.OnCreate = func(sb *executortest.FakeSandbox) {
		mu.Lock()
		created = append(created, sb.Spec().UserID)
		mu.Unlock()
		sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
			select {
			case <-gate:
			case <-ctx.Done():
				return executor.ExecResult{ExitCode: -1}, ctx.Err()
			}
			return scripted.Text(executor.Usage{}, "ok").Exec(ctx, cmd)
		}
	}
	return e, gate, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(created)
	}
}

func TestAdmissionIsFairAcrossUsers(t *testing.T) {
	e, gate, users := gatedEnv(t, middleware.Admission{MaxRuns: 2, MaxRunsPerUser: 2, MaxMemoryBytes: -1})
	var wg sync.WaitGroup
	errs := make(chan error, 31)
	send := func(user, chat string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(chat)
			req.UserID = user
			_, err := e.h.Handle(context.Background(), req, nil)
			errs <- err
		}()
	}
	for i := range 30 {
		send("alice", fmt.Sprint("a", i))
	}
	// Both admitted runs have their sandboxes, so the next one created is
	// the next one admitted.
	require.Eventually(t, func() bool { s := e.o.Admission(); return s.Running == 2 && s.Waiting == 28 && len(users()) == 2 }, 10*time.Second, time.Millisecond)
	send("bob", "b")
	require.Eventually(t, func() bool { return e.o.Admission().Waiting == 29 }, 10*time.Second, time.Millisecond)

	gate <- struct{}{} // one of alice's runs ends
	require.Eventually(t, func() bool { return len(users()) == 3 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, "bob", users()[2], "bob's request takes the first free slot, ahead of alice's 28 queued ones: %v", users())
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

func TestAdmissionBurstOverflowIsExact(t *testing.T) {
	const burst, queue, runs = 200, 100, 10
	e, gate, _ := gatedEnv(t, middleware.Admission{MaxRuns: runs, MaxRunsPerUser: runs, MaxQueue: queue, MaxMemoryBytes: -1})
	var wg sync.WaitGroup
	var mu sync.Mutex
	kinds := map[middleware.Kind]int{}
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(fmt.Sprint("c", i))
			req.UserID = fmt.Sprint("u", i%7)
			_, err := e.h.Handle(context.Background(), req, nil)
			e := middleware.AsError(err)
			mu.Lock()
			defer mu.Unlock()
			if e == nil {
				kinds[""]++
				return
			}
			kinds[e.Kind]++
			if e.Kind == middleware.KindOverloaded {
				assert.True(t, e.Retry)
				assert.Positive(t, e.RetryAfter)
			}
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return kinds[middleware.KindOverloaded] == burst-queue-runs
	}, 30*time.Second, time.Millisecond)
	assert.Equal(t, middleware.AdmissionStats{Running: runs, Waiting: queue, MemoryBytes: runs * config.DefaultMemoryBytes}, e.o.Admission())
	close(gate)
	wg.Wait()
	assert.Equal(t, map[middleware.Kind]int{"": queue + runs, middleware.KindOverloaded: burst - queue - runs}, kinds,
		"exactly the overflow is refused; everything admitted succeeds")
}
