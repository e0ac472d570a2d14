package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
)

// Defaults of Options.
const (
	DefaultDrainTimeout    = 30 * time.Second
	DefaultTeardownTimeout = 30 * time.Second
	DefaultExitGrace       = 5 * time.Second
	DefaultHome            = "/home/agent"
)

// Options configure an Orchestrator. Catalog, Runners and one of Executor
// and NewExecutor are required.
type Options struct {
	// Catalog holds the gateway's assistants.
	Catalog Catalog
	// Executor is the executor when the caller owns it: the Orchestrator
	// uses it and never closes it. NewExecutor instead opens one (e.g.
	// executor/docker's New) that the Orchestrator owns and closes in
	// Close. Set exactly one.
	Executor    executor.Executor
	NewExecutor func(ctx context.Context, log hclog.Logger) (executor.Executor, error)
	// Runners are the agent CLIs, by Name(); each sandboxed assistant's
	// Sandbox.Runner must name one.
	Runners []executor.Runner
	// ModelRouter is the model route provider when the caller owns it (e.g.
	// middleware/modelroute's Router; never closed by the Orchestrator);
	// NewModelRouter instead opens one the Orchestrator owns (closed in
	// Close when it implements io.Closer). At most one; without either,
	// runs get no ModelBaseURL and APIKey and usage is the CLI's own
	// report, and an assistant with a connector to route is refused at New.
	ModelRouter    ModelRouter
	NewModelRouter func(ctx context.Context, log hclog.Logger) (ModelRouter, error)
	// Tools serves the gateway's own tools to the agents (optional; see
	// ToolHost, and agentbox.MCPTools for executor/mcphost's Host).
	Tools ToolHost
	// ChatMemory backs the hooks' ctx.memory.chat (default: a fresh
	// hooks.NewChatMemory with its default caps).
	ChatMemory *hooks.ChatMemory
	// Logger receives the lifecycle's log lines (default: discarded).
	Logger hclog.Logger
	// DrainTimeout bounds how long Close lets runs in flight finish before
	// it cancels them (default DefaultDrainTimeout).
	DrainTimeout time.Duration
	// Egress opens the egress proxy of runs whose assistant has an
	// egress policy (modelroute.NewEgress; without it such runs fail).
	Egress EgressRouter
	// TeardownTimeout bounds a sandbox's removal, which runs on a context
	// the caller cannot cancel (default DefaultTeardownTimeout).
	TeardownTimeout time.Duration
	// ExitGrace is how long the agent CLI may take to exit after its final
	// result line before it is killed (default DefaultExitGrace).
	ExitGrace time.Duration
	// MeterProvider and TracerProvider receive the middleware's metrics
	// and spans (default: OpenTelemetry's global providers, which discard
	// them until the program installs an SDK). See the package
	// documentation for the names.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// SessionDir keeps each chat's agent CLI session transcript between
	// turns, in SessionDir/{user}/chat-{chat}/{assistant}/, so that a
	// follow-up turn resumes the agent's own session, tool calls and
	// results included (see session.go); "" turns continuity off and
	// earlier turns reach the agent as text. Use the executor's
	// DataDir/sessions. The directory must not be reachable from any
	// sandbox.
	SessionDir string
	// SessionRetention is how long a chat's sessions are kept after its
	// last turn (executor.DefaultRetention when 0, as the backends keep
	// workspaces; negative: forever); a sweep removes older ones every
	// SessionSweepInterval (executor.DefaultRetentionInterval when 0;
	// negative: no sweep), whatever the backend.
	SessionRetention     time.Duration
	SessionSweepInterval time.Duration
	// SandboxDir keeps the client sandboxes' records (see
	// CreateSandbox) across restarts, one file per user; "" keeps them in
	// memory only. Use the executor's DataDir/client-sandboxes; the
	// directory must not be reachable from any sandbox.
	SandboxDir string
	// Checkpoints are the gateway's defaults for the workspaces'
	// checkpoints (middleware/checkpoints.go): on wherever the executor
	// keeps them (Capabilities.Checkpoints) unless Off; an assistant's own
	// bounds win field by field.
	Checkpoints Checkpoints
	// Admission bounds the sandboxed requests in flight and queues the
	// rest fairly across users (the zero value derives its bounds from
	// this machine; see Admission).
	Admission Admission
}

// Orchestrator answers requests for sandboxed assistants: its Wrap is the
// Middleware that gateways install. Build one with New; it is safe for
// concurrent use.
type Orchestrator struct {
	opts    Options
	log     hclog.Logger
	runners map[string]executor.Runner
	exec    executor.Executor
	caps    executor.Capabilities // the executor's, taken at New
	// checkpoints is the executor's Checkpointer (Capabilities.Checkpoints).
	checkpoints executor.Checkpointer
	prober      executor.EnvironmentProber
	models      ModelRouter
	memory      *hooks.ChatMemory
	leases      *executor.Leases
	adm         *admission // nil: admission control is off
	tel         *telemetry
	pool        *warmPool // kept session containers
	// sandboxes are the client-owned sandboxes (sandboxes.go).
	sandboxes *sandboxRegistry
	// bg counts the runs' work after their responses (teardowns) and the
	// environment snapshots; stopBg cancels the latter and the session
	// sweep, which sweeps counts.
	bg     *bgWork
	stopBg context.CancelFunc
	sweeps sync.WaitGroup

	// cleanups undo what provisioning did, in reverse order.
	cleanups []func() error

	mu     sync.Mutex
	closed bool
	nextID uint64
	runs   map[uint64]context.CancelCauseFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// Causes of a run's context ending that are not the caller's doing.
var (
	errRunTimeout = errors.New("middleware: the run passed the sandbox timeout")
	errDraining   = errors.New("middleware: the gateway is shutting down")
)

// New checks opts, provisions the executor and the model router, and
// validates the catalog against the runners. When a step fails, what the
// earlier steps opened is closed again before New returns the error.
func New(ctx context.Context, opts Options) (*Orchestrator, error) {
	o := &Orchestrator{opts: opts, leases: executor.NewLeases(), runs: make(map[uint64]context.CancelCauseFunc)}
	o.pool = newWarmPool(o)
	o.sandboxes = newSandboxRegistry(o)
	o.bg = newBgWork()
	if err := o.configure(); err != nil {
		return nil, err
	}
	if err := o.provision(ctx); err != nil {
		return nil, errors.Join(err, o.cleanup())
	}
	if err := o.validate(ctx); err != nil {
		return nil, errors.Join(err, o.cleanup())
	}
	if err := o.sandboxes.load(); err != nil {
		return nil, errors.Join(err, o.cleanup())
	}
	var bgCtx context.Context
	bgCtx, o.stopBg = context.WithCancel(context.Background())
	o.prefetchEnvironments(bgCtx)
	o.startSessionSweep(bgCtx)
	return o, nil
}

// configure checks opts and applies defaults; it opens nothing.
func (o *Orchestrator) configure() error {
	var errs []error
	if o.opts.Catalog == nil {
		errs = append(errs, errors.New("Options.Catalog is nil; pass the gateway's assistants (e.g. NewCatalog)"))
	}
	switch {
	case o.opts.Executor == nil && o.opts.NewExecutor == nil:
		errs = append(errs, errors.New("Options.Executor and Options.NewExecutor are nil; pass an executor such as executor/docker's"))
	case o.opts.Executor != nil && o.opts.NewExecutor != nil:
		errs = append(errs, errors.New("Options.Executor and Options.NewExecutor are both set; pass one"))
	}
	if o.opts.ModelRouter != nil && o.opts.NewModelRouter != nil {
		errs = append(errs, errors.New("Options.ModelRouter and Options.NewModelRouter are both set; pass one"))
	}
	o.runners = make(map[string]executor.Runner, len(o.opts.Runners))
	for i, r := range o.opts.Runners {
		switch {
		case r == nil:
			errs = append(errs, fmt.Errorf("Options.Runners[%d] is nil", i))
		case r.Name() == "":
			errs = append(errs, fmt.Errorf("Options.Runners[%d] has an empty Name()", i))
		case o.runners[r.Name()] != nil:
			errs = append(errs, fmt.Errorf("two runners are named %q; give each command one runner", r.Name()))
		default:
			o.runners[r.Name()] = r
		}
	}
	if len(o.opts.Runners) == 0 {
		errs = append(errs, errors.New("Options.Runners is empty; pass at least one runner (e.g. claude.Runner)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("middleware: %w", err)
	}
	o.log = o.opts.Logger
	if o.log == nil {
		o.log = hclog.NewNullLogger()
	}
	if !o.opts.Admission.Off {
		o.adm = newAdmission(o.opts.Admission)
		o.adm.reclaim = o.pool.reclaim
	}
	tel, err := newTelemetry(o)
	if err != nil {
		return fmt.Errorf("middleware: create the metrics: %w", err)
	}
	o.tel = tel
	o.memory = o.opts.ChatMemory
	if o.memory == nil {
		o.memory = hooks.NewChatMemory(0, 0, 0)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.opts.DrainTimeout, DefaultDrainTimeout}, {&o.opts.TeardownTimeout, DefaultTeardownTimeout}, {&o.opts.ExitGrace, DefaultExitGrace}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if o.opts.SessionRetention == 0 {
		o.opts.SessionRetention = executor.DefaultRetention
	}
	if o.opts.SessionSweepInterval == 0 {
		o.opts.SessionSweepInterval = executor.DefaultRetentionInterval
	}
	return nil
}

// provision opens the executor and the model router, registering how to
// undo each before the next step starts.
func (o *Orchestrator) provision(ctx context.Context) error {
	o.exec, o.models = o.opts.Executor, o.opts.ModelRouter
	if o.exec == nil {
		ex, err := o.opts.NewExecutor(ctx, o.log.Named("executor"))
		if err != nil {
			return fmt.Errorf("middleware: open the executor: %w", err)
		}
		if ex == nil {
			return errors.New("middleware: NewExecutor returned a nil executor and no error")
		}
		o.exec = ex
		o.cleanups = append(o.cleanups, ex.Close)
	}
	if o.opts.NewModelRouter == nil {
		return nil
	}
	m, err := o.opts.NewModelRouter(ctx, o.log.Named("models"))
	if err != nil {
		return fmt.Errorf("middleware: open the model router: %w", err)
	}
	if m == nil {
		return errors.New("middleware: NewModelRouter returned a nil router and no error")
	}
	o.models = m
	if c, ok := m.(interface{ Close() error }); ok {
		o.cleanups = append(o.cleanups, c.Close)
	}
	return nil
}

// validate checks that every sandboxed assistant names a known runner,
// has an image and asks for nothing the executor's capabilities or the
// model router cannot honour, reporting every problem at once.
func (o *Orchestrator) validate(ctx context.Context) error {
	list, err := o.opts.Catalog.List(ctx)
	if err != nil {
		return fmt.Errorf("middleware: list the assistants: %w", err)
	}
	var errs []error
	o.caps = o.exec.Capabilities()
	if o.caps.Checkpoints {
		var ok bool
		if o.checkpoints, ok = o.exec.(executor.Checkpointer); !ok {
			errs = append(errs, fmt.Errorf("the %s executor declares checkpoints and does not implement executor.Checkpointer; fix its Capabilities", o.caps.Backend))
		}
	} else if !o.opts.Checkpoints.Off {
		o.log.Info("workspace checkpoints: the backend keeps none; a chat's files do not follow its history back", "backend", o.caps.Backend)
	}
	if o.caps.Environment {
		var ok bool
		if o.prober, ok = o.exec.(executor.EnvironmentProber); !ok {
			errs = append(errs, fmt.Errorf("the %s executor declares environment snapshots and does not implement executor.EnvironmentProber; fix its Capabilities", o.caps.Backend))
		}
	}
	for _, a := range list {
		if a == nil || a.Sandbox == nil {
			continue
		}
		if o.runners[a.Sandbox.Runner] == nil {
			errs = append(errs, fmt.Errorf("assistant %q: sandbox runner %q is not one of %v; fix the sandbox command or pass its runner", a.ID, a.Sandbox.Runner, o.runnerNames()))
		}
		if a.Sandbox.Spec.Image == "" {
			errs = append(errs, fmt.Errorf("assistant %q: sandbox image is empty; set sandbox.image", a.ID))
		}
		if o.models == nil && !a.Sandbox.DirectModel && a.Sandbox.Connector.Upstream != "" {
			errs = append(errs, fmt.Errorf("assistant %q: its connector %s needs a model route, and the Orchestrator has none; pass Options.ModelRouter (middleware/modelroute's New)", a.ID, a.Sandbox.Connector.Upstream))
		}
		if o.opts.Egress == nil && a.Sandbox.Egress != nil {
			errs = append(errs, fmt.Errorf("assistant %q: it has sandbox.egress, and the Orchestrator has no Options.Egress; pass middleware/modelroute's NewEgress", a.ID))
		}
		errs = append(errs, o.validateCapabilities(a)...)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("middleware: %w", err)
	}
	return nil
}

// validateCapabilities refuses what a's sandbox asks of the executor and
// the model router that they do not declare they can do.
func (o *Orchestrator) validateCapabilities(a *Assistant) []error {
	spec := a.Sandbox.Spec
	spec.Egress = spec.Egress || a.Sandbox.Egress != nil
	errs := o.caps.Check(spec)
	if spec.IdleTTL > 0 && !o.caps.Keep {
		errs = append(errs, fmt.Errorf("sandbox.%s %q: the %s backend cannot keep a sandbox between requests; use policy %q: %w", executor.KeyPolicy, "session", o.caps.Backend, "request", executor.ErrInvalid))
	}
	if o.models != nil && !a.Sandbox.DirectModel {
		errs = append(errs, o.models.Validate(a, o.caps))
	}
	if b := a.Sandbox.Checkpoints; !o.caps.Checkpoints && !b.Off && b.Bounds != (executor.CheckpointBounds{}) {
		// Bounds set for checkpoints this backend never takes would have
		// no effect; the default (on, where the backend keeps them) is
		// said once at start-up instead.
		errs = append(errs, fmt.Errorf("sandbox.checkpoints: the %s backend keeps no workspace checkpoints; remove sandbox.checkpoints or set it to false: %w", o.caps.Backend, executor.ErrInvalid))
	}
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("assistant %q: %w", a.ID, err)
		}
	}
	return errs
}

func (o *Orchestrator) runnerNames() []string {
	names := make([]string, 0, len(o.opts.Runners))
	for _, r := range o.opts.Runners {
		names = append(names, r.Name())
	}
	return names
}

// cleanup undoes provisioning in reverse order and joins the errors.
func (o *Orchestrator) cleanup() error {
	var errs []error
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, o.cleanups[i]())
	}
	o.cleanups = nil
	return errors.Join(errs...)
}

// Close stops taking requests, lets runs in flight finish for up to
// DrainTimeout, then cancels the rest (they tear their sandboxes down) and
// waits for their teardown, bounded by TeardownTimeout; then it removes
// the kept session containers; last it closes the model router and the
// executor. It is safe to call more than once.
func (o *Orchestrator) Close() error {
	o.closeOnce.Do(func() {
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
		if o.stopBg != nil {
			o.stopBg()
		}
		o.sweeps.Wait()
		var errs []error
		if !waitTimeout(&o.wg, o.opts.DrainTimeout) {
			o.mu.Lock()
			n := len(o.runs)
			for _, cancel := range o.runs {
				cancel(errDraining)
			}
			o.mu.Unlock()
			o.log.Warn("canceling runs still in flight after the drain timeout", "runs", n, "drain_timeout", o.opts.DrainTimeout)
			if !waitTimeout(&o.wg, o.opts.TeardownTimeout) {
				errs = append(errs, fmt.Errorf("middleware: runs still tearing down after %v; their containers are left to the executor's reconciler", o.opts.TeardownTimeout))
			}
		}
		// Teardowns run after the responses; kept containers go last.
		if !o.bg.wait(o.opts.TeardownTimeout) {
			errs = append(errs, fmt.Errorf("middleware: sandboxes still tearing down after %v; they are left to the executor's reconciler", o.opts.TeardownTimeout))
		}
		o.sandboxes.close()
		o.pool.close()
		errs = append(errs, o.cleanup())
		o.closeErr = errors.Join(errs...)
	})
	return o.closeErr
}

// Admission returns a snapshot of the admission control (zero when it is
// off).
func (o *Orchestrator) Admission() AdmissionStats {
	if o.adm == nil {
		return AdmissionStats{}
	}
	return o.adm.stats()
}

// waitTimeout waits for wg up to d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// enter registers a run; the returned context is canceled by Close after
// the drain timeout, and exit unregisters it.
func (o *Orchestrator) enter(ctx context.Context) (context.Context, func(), error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, nil, Errorf(KindUnavailable, nil, "the gateway is shutting down; send the request again")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	id := o.nextID
	o.nextID++
	o.runs[id] = cancel
	o.wg.Add(1)
	return ctx, func() {
		o.mu.Lock()
		delete(o.runs, id)
		o.mu.Unlock()
		cancel(nil)
		o.wg.Done()
	}, nil
}

// Wrap is the Middleware: requests for assistants with a sandbox block are
// answered in a sandbox; every other request (unknown assistant, no
// sandbox block) goes to next unchanged.
func (o *Orchestrator) Wrap(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, req *Request, emit Emit) (*Response, error) {
		a, err := o.opts.Catalog.Lookup(ctx, req.AssistantID)
		switch {
		case errors.Is(err, ErrUnknownAssistant):
			return next.Handle(ctx, req, emit)
		case err != nil:
			return nil, Errorf(KindConfig, err, "the assistant %q cannot be loaded; the gateway's log has the details", req.AssistantID)
		case a.Sandbox == nil:
			return next.Handle(withAssistant(ctx, a), req, emit)
		}
		return o.serve(ctx, a, req, emit)
	})
}

var _ Middleware = (*Orchestrator)(nil).Wrap

// Handler is the Orchestrator as a terminal Handler: sandboxed assistants
// are answered, every other request fails with KindNotFound. It suits
// adapters that route only sandboxed requests to agentbox (see
// middleware/openai.Middleware).
func (o *Orchestrator) Handler() Handler { return o.Wrap(UnknownAssistant) }

// Settle waits until the sandboxes of the requests answered so far are
// torn down or kept, and the environment snapshots New started are taken:
// the middleware removes a sandbox after it returned the response, off
// the request's path, and holds the chat's lease and the run slot until
// then. Tests and tools that inspect containers after a
// request call it; gateways need not.
func (o *Orchestrator) Settle(ctx context.Context) error {
	select {
	case <-o.bg.idle():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("middleware: sandboxes still tearing down: %w", ctx.Err())
	}
}

// bgWork counts work that runs after the responses. Unlike a WaitGroup it
// may gain work while someone waits for it to end.
type bgWork struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n is 0
}

func newBgWork() *bgWork {
	z := make(chan struct{})
	close(z)
	return &bgWork{zero: z}
}

func (b *bgWork) add() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 {
		b.zero = make(chan struct{})
	}
	b.n++
}

func (b *bgWork) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n--; b.n == 0 {
		close(b.zero)
	}
}

// idle is closed once no work is under way (at the time of the call).
func (b *bgWork) idle() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.zero
}

// wait waits up to d for no work to be under way and reports whether it
// came to that.
func (b *bgWork) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.idle():
		return true
	case <-t.C:
		return false
	}
}
