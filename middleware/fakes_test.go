package middleware_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

// tracer records the order in which the parts were called.
type tracer struct {
	mu  sync.Mutex
	log []string
}

func (t *tracer) add(s string) {
	t.mu.Lock()
	t.log = append(t.log, s)
	t.mu.Unlock()
}

func (t *tracer) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.log)
}

// tracingExecutor wraps a FakeExecutor and traces its sandboxes' calls.
type tracingExecutor struct {
	*executortest.FakeExecutor
	tr     *tracer
	closed int
	// closeCtxErr records ctx.Err() of each sandbox Close call.
	mu          sync.Mutex
	closeCtxErr []error
}

func (e *tracingExecutor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	e.tr.add("create")
	sb, err := e.FakeExecutor.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &tracingSandbox{Sandbox: sb, e: e}, nil
}

func (e *tracingExecutor) Close() error {
	e.tr.add("executor.close")
	e.closed++
	return e.FakeExecutor.Close()
}

type tracingSandbox struct {
	executor.Sandbox
	e *tracingExecutor
}

func (s *tracingSandbox) WriteFile(ctx context.Context, name string, data []byte) error {
	s.e.tr.add("write " + name)
	return s.Sandbox.WriteFile(ctx, name, data)
}

func (s *tracingSandbox) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	s.e.tr.add("exec " + cmd.Args[0])
	return s.Sandbox.Exec(ctx, cmd)
}

func (s *tracingSandbox) Close(ctx context.Context) error {
	s.e.tr.add("close")
	s.e.mu.Lock()
	s.e.closeCtxErr = append(s.e.closeCtxErr, ctx.Err())
	s.e.mu.Unlock()
	return s.Sandbox.Close(ctx)
}

// fakeRouter is a ModelRouter whose routes meter a fixed usage.
type fakeRouter struct {
	scripted.NoPreStart
	tr      *tracer
	usage   executor.Usage
	openErr error
	closed  int
	stop    string // the budget its routes report as stopping them
}

func (m *fakeRouter) Open(_ context.Context, sb executor.Sandbox, a *middleware.Assistant) (middleware.ModelRoute, error) {
	m.tr.add("route.open")
	if m.openErr != nil {
		return nil, m.openErr
	}
	return &fakeRoute{m: m}, nil
}

func (m *fakeRouter) Close() error {
	m.tr.add("router.close")
	m.closed++
	return nil
}

type fakeRoute struct{ m *fakeRouter }

func (r *fakeRoute) BaseURL() string       { return "http://127.0.0.1:7000" }
func (r *fakeRoute) Token() string         { return "per-request-token" }
func (r *fakeRoute) Usage() executor.Usage { return r.m.usage }
func (r *fakeRoute) Close() error          { r.m.tr.add("route.close"); return nil }
func (r *fakeRoute) BudgetStop() string    { return r.m.stop }

// env is an Orchestrator over fakes, with one sandboxed assistant "coder"
// and one plain assistant "qa".
type env struct {
	o      *middleware.Orchestrator
	tr     *tracer
	ex     *tracingExecutor
	runner *scripted.Runner
	router *fakeRouter
	coder  *middleware.Assistant
	// script is what the next sandboxes' agent does.
	mu     sync.Mutex
	script scripted.Script
	next   middleware.Handler
	h      middleware.Handler
}

type envOption func(*env, *middleware.Options)

func withHooks(h hooks.Hooks) envOption {
	return func(e *env, _ *middleware.Options) { e.coder.Hooks = tracedHooks{Hooks: h, tr: e.tr} }
}

// tracedHooks traces the hooks' calls.
type tracedHooks struct {
	hooks.Hooks
	tr *tracer
}

func (h tracedHooks) Create(ctx context.Context, hc *hooks.Context, msgs []executor.Message) (*hooks.CreateResult, error) {
	h.tr.add("hook.create")
	return h.Hooks.Create(ctx, hc, msgs)
}

func (h tracedHooks) Next(ctx context.Context, hc *hooks.Context, p hooks.NextPayload) (*hooks.NextResult, error) {
	h.tr.add("hook.next")
	return h.Hooks.Next(ctx, hc, p)
}

func withRouter() envOption {
	return func(e *env, o *middleware.Options) {
		e.router = &fakeRouter{tr: e.tr, usage: executor.Usage{InputTokens: 1000, OutputTokens: 200}}
		o.NewModelRouter = func(context.Context, hclog.Logger) (middleware.ModelRouter, error) { return e.router, nil }
	}
}

func withSpec(f func(*executor.Spec)) envOption {
	return func(e *env, _ *middleware.Options) { f(&e.coder.Sandbox.Spec) }
}

func withOptions(f func(*middleware.Options)) envOption {
	return func(_ *env, o *middleware.Options) { f(o) }
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	tr := &tracer{}
	e := &env{tr: tr, runner: &scripted.Runner{OnCall: tr.add}}
	e.ex = &tracingExecutor{FakeExecutor: executortest.NewExecutor(t), tr: tr}
	e.ex.OnCreate = func(sb *executortest.FakeSandbox) {
		e.mu.Lock()
		s := e.script
		e.mu.Unlock()
		sb.ExecFunc = s.Exec
	}
	e.coder = &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner:    "scripted",
		Spec:      executor.Spec{Image: "agentbox/sandbox-claude:latest", Timeout: time.Minute},
		MaxOutput: 64 << 20,
		Files:     map[string][]byte{".claude/skills/review/SKILL.md": []byte("---\nname: review\n---\n")},
		Run:       executor.RunRequest{Model: "claude-test", SystemPrompt: "be brief"},
	}}
	o := middleware.Options{
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return e.ex, nil },
		Runners:     []executor.Runner{e.runner},
	}
	for _, opt := range opts {
		opt(e, &o)
	}
	cat, err := middleware.NewCatalog(e.coder, &middleware.Assistant{ID: "qa"})
	require.NoError(t, err)
	o.Catalog = cat
	e.o, err = middleware.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.o.Close() })
	e.next = middleware.UnknownAssistant
	h := e.o.Wrap(middleware.HandlerFunc(func(ctx context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		return e.next.Handle(ctx, req, emit)
	}))
	// The sandbox is torn down after the response: the tests look at it
	// once that is done.
	e.h = middleware.HandlerFunc(func(ctx context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		resp, err := h.Handle(ctx, req, emit)
		require.NoError(t, e.o.Settle(context.Background()))
		return resp, err
	})
	return e
}

func (e *env) setScript(s scripted.Script) {
	e.mu.Lock()
	e.script = s
	e.mu.Unlock()
}

// request is a valid request for the sandboxed assistant.
func request(chat string) *middleware.Request {
	return &middleware.Request{
		AssistantID: "coder", Model: "coder", UserID: "alice", ChatID: chat,
		Messages: []executor.Message{{Role: "user", Content: "write hello.txt"}},
	}
}

// collector records emitted events.
type collector struct {
	mu     sync.Mutex
	events []executor.Event
}

func (c *collector) emit(ev executor.Event) error {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	return nil
}

func (c *collector) get() []executor.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

func (c *collector) text() string {
	s := ""
	for _, ev := range c.get() {
		if ev.Kind == executor.EventText {
			s += ev.Text
		}
	}
	return s
}

type executortestSandbox = executortest.FakeSandbox

func executortestExecutor(t testing.TB) *executortest.FakeExecutor {
	return executortest.NewExecutor(t)
}

// tempDir makes a directory for examples, which have no testing.T.
func tempDir() (string, func()) {
	dir, err := os.MkdirTemp("", "middleware-example-")
	if err != nil {
		panic(err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }
}
