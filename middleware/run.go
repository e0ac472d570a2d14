package middleware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
)

// Texts of the EventSandbox events the middleware emits.
const (
	// SandboxQueued: the request waits for a run slot; the event's Queue
	// says where it stands. Sent when it starts to wait and when its
	// position changes, at most once a second.
	SandboxQueued = "queued"
	// SandboxReady: the container is up (after the lease and Create).
	SandboxReady = "ready"
	// SandboxClosed: the container is removed. The removal runs after
	// the response (off the request's path), when the stream has ended, so
	// the middleware no longer sends it; it stays for Emit implementations
	// and clients that know the name.
	SandboxClosed = "closed"
)

// run is the state of one sandboxed request.
type run struct {
	o     *Orchestrator
	a     *Assistant
	req   *Request
	log   hclog.Logger
	t     Timings
	sb    executor.Sandbox
	route ModelRoute
	tools ToolSession // the run's tool session, if any
	hc    *hooks.Context
	// place is the key of the run's lease, workspace and kept container:
	// the request's user and chat, or its client sandbox's (client is
	// then that sandbox; see sandboxes.go).
	place  chatID
	client *clientSandbox
	// prewarming: the run only starts a client sandbox's container (and a
	// CLI for a new session) before its first request.
	prewarming bool
	// toolUses are the agent's write and Bash calls awaiting their
	// results, for the client sandbox's lifecycle events.
	toolUses map[string]*executor.ToolUse
	// session is the chat's CLI session, kept after a good run.
	session *chatSession
	// warm is the chat's kept container the run continues in (session
	// policy), or nil; lifeEnd is when the sandbox's container ends.
	warm    *warmEntry
	lifeEnd time.Time
	// messages are the agent's messages (after the Create hook) and
	// answer the answer the client got, for the next turn's CLI.
	messages []executor.Message
	answer   string
	// answered: the run ended with answer, and the session is saved in
	// the tail (saveSession).
	answered bool
	// exited waits for the agent CLI's exit after its final result (set
	// by parseProc; the tail calls it before the session is saved and the
	// sandbox kept or removed).
	exited func()
	// phase is the last phase the request entered, for its outcome line.
	phase string
	// arrived is when the request reached the middleware.
	arrived time.Time
	tr      runTrace
	// environment is the summary appended to the system prompt ("" for
	// none; see environment.go).
	environment string
	// egress is the run's egress proxy (nil without sandbox.egress).
	egress io.Closer
	// budgetStop is the budget that stopped the model route's traffic,
	// kept when the route closes (modelproxy.BudgetCalls and the rest).
	budgetStop string

	emitMu   sync.Mutex
	emit     Emit
	emitErr  error
	streamed strings.Builder
	// detached: the response is sent; events go nowhere.
	detached bool
}

// emitError marks an error returned by the caller's Emit.
type emitError struct{ err error }

func (e *emitError) Error() string { return "emit: " + e.err.Error() }
func (e *emitError) Unwrap() error { return e.err }

// send forwards ev to the caller's Emit, one at a time, and records the
// streamed text. After Emit failed once, it fails at once: the client is
// gone.
func (r *run) send(ev executor.Event) error {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	if r.detached {
		return nil
	}
	if r.emitErr != nil {
		return r.emitErr
	}
	r.traceEvent(ev)
	if err := r.emit(ev); err != nil {
		r.emitErr = &emitError{err}
		return r.emitErr
	}
	if ev.Kind == executor.EventText {
		r.streamed.WriteString(ev.Text)
	}
	if r.client == nil {
		return nil
	}
	if lc := r.lifecycle(ev); lc != nil {
		if err := r.emit(*lc); err != nil {
			r.emitErr = &emitError{err}
			return r.emitErr
		}
	}
	return nil
}

// serve answers req in a sandbox, the lifecycle of DESIGN.md "One request,
// end to end".
func (o *Orchestrator) serve(ctx context.Context, a *Assistant, req *Request, emit Emit) (resp *Response, err error) {
	start := time.Now()
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	runner := o.runners[a.Sandbox.Runner]
	if runner == nil {
		return nil, Errorf(KindConfig, nil, "the assistant %q names the runner %q, which this gateway does not have; fix its sandbox command", a.ID, a.Sandbox.Runner)
	}
	ctx, exit, err := o.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer exit()
	if d := a.Sandbox.Spec.Timeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errRunTimeout)
		defer cancel()
	}
	if emit == nil {
		emit = func(executor.Event) error { return nil }
	}
	r := &run{o: o, a: a, req: req, emit: emit, arrived: start, log: o.log.With("assistant", a.ID, "user", req.UserID, "chat", req.ChatID),
		place: chatID{req.UserID, req.ChatID}}
	if id := RequestID(ctx); id != "" {
		r.log = r.log.With("request", id)
	}
	if req.SandboxID != "" {
		s, detach, err := o.sandboxes.attach(req.UserID, req.SandboxID, a)
		if err != nil {
			return nil, err
		}
		defer detach()
		r.client, r.place, r.a = s, s.place(), inSandbox(a, s)
		r.log = r.log.With("sandbox", s.ID)
	}
	ctx = r.startTrace(ctx)
	// tail runs after the response is sent: the sandbox's teardown (or
	// its keeping, session policy), then the run slot, then the chat's
	// lease, so that the chat's next request waits until the container is
	// gone (or kept) and a crash in between leaves it to the takeover.
	var tail func()
	defer func() {
		r.t.Total = time.Since(start)
		if resp != nil {
			resp.Timings = r.t
		}
		r.emitMu.Lock()
		r.detached = true
		r.emitMu.Unlock()
		outcome := err
		if err != nil {
			err = loggedError{err}
		}
		wrapUp := func() {
			if tail != nil {
				tail()
			}
			r.logDone(outcome)
			r.record(resp, outcome)
		}
		if tail == nil {
			wrapUp()
			return
		}
		o.bg.add()
		go func() {
			defer o.bg.done()
			wrapUp()
		}()
	}()

	// The queue's deadline counts from arrival: the lease wait is part of
	// the wait, not on top of it. It is used only with admission on.
	var deadline time.Time
	if o.adm != nil {
		deadline = start.Add(o.adm.cfg.MaxWait)
	}
	r.enter("lease")
	release, err := r.lease(ctx, deadline)
	if err != nil {
		return nil, err
	}
	tail = release
	r.takeWarm()
	r.enter("queue")
	free, err := r.admit(ctx, deadline)
	if err != nil {
		r.giveBackWarm()
		return nil, err
	}
	tail = func() {
		if r.sb != nil {
			r.windUp(ctx, err)
		}
		free() // after the teardown: the slot covers the container
		release()
	}
	r.enter("container_start")
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	r.enter("workspace")
	if err := r.workspace(ctx); err != nil {
		return nil, err
	}
	r.enter("create_hook")
	messages, err := r.createHook(ctx)
	if err != nil {
		return nil, err
	}
	r.enter("agent")
	comp, runErr := r.agent(ctx, runner, messages)
	return r.finish(ctx, comp, runErr)
}

// windUp closes the run's routes, waits for the agent CLI's exit, saves
// the chat's session, and keeps the sandbox for the chat's next turn when
// the session policy allows, or removes it. It runs after the response:
// the CLI's exit (30-80 ms after its result) and the transcript's copy
// are not on the request's path, and the chat's next request waits for
// the lease, which is released after windUp.
func (r *run) windUp(ctx context.Context, err error) {
	// The turn is answered: no model or tool call of the CLI is
	// legitimate any more, and none may run unmetered by the response
	// while it exits (the agent can reach its CLI's stdin through /proc
	// and queue another prompt).
	r.closeRoutes()
	if r.exited != nil {
		r.exited()
	}
	if r.answered {
		r.saveSession(ctx, r.session, r.answer)
	}
	if r.keepable(err) && r.keep(ctx) {
		return
	}
	r.teardown(ctx)
}

// checkRequest rejects what no sandboxed run can answer.
func checkRequest(req *Request) error {
	if err := executor.ValidateID("user", req.UserID); err != nil {
		return &Error{Kind: KindBadRequest, Param: "user", Err: err,
			Message: fmt.Sprintf("a sandboxed assistant needs a valid user id: %v", unwrapMessage(err))}
	}
	if err := executor.ValidateID("chat", req.ChatID); err != nil {
		return &Error{Kind: KindBadRequest, Param: "chat", Err: err,
			Message: fmt.Sprintf("a sandboxed assistant needs a valid chat id: %v", unwrapMessage(err))}
	}
	if isSandboxChat(req.ChatID) {
		return &Error{Kind: KindBadRequest, Param: "chat", Message: fmt.Sprintf("chat ids starting with %q are reserved for client sandboxes; name the sandbox instead", sandboxChatPrefix)}
	}
	if len(req.Messages) == 0 {
		return &Error{Kind: KindBadRequest, Param: "messages", Message: "the conversation is empty; send at least one user message"}
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return &Error{Kind: KindBadRequest, Param: fmt.Sprintf("messages[%d].role", i),
				Message: fmt.Sprintf("messages[%d] has role %q; use system, user or assistant", i, m.Role)}
		}
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role != "user" {
		return &Error{Kind: KindBadRequest, Param: "messages",
			Message: fmt.Sprintf("the last message has role %q; a sandboxed assistant answers a user message, so end the conversation with one", last.Role)}
	}
	return nil
}

// unwrapMessage drops the package prefix of executor's sentinel from err's
// text, for client messages.
func unwrapMessage(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+executor.ErrInvalid.Error())
}

// failure classifies err, which ended phase, by what ended the run: the
// client (canceled), the sandbox timeout, the gateway's shutdown, or the
// phase's own error (fallback).
func (r *run) failure(ctx context.Context, err error, fallback *Error) *Error {
	r.emitMu.Lock()
	gone := r.emitErr
	r.emitMu.Unlock()
	switch {
	case gone != nil:
		// err often wraps the emit failure already (the parser stopped on
		// it); joining it again would print the chain twice.
		cause := err
		if cause == nil || !errors.Is(cause, errors.Unwrap(gone)) {
			cause = errors.Join(gone, err)
		}
		return Errorf(KindCanceled, cause, "the client went away")
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errRunTimeout):
		return Errorf(KindTimeout, err, "the request passed the assistant's sandbox timeout of %v; raise sandbox.timeout or ask for less", r.a.Sandbox.Spec.Timeout)
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errDraining):
		return Errorf(KindUnavailable, err, "the gateway shut down during the request")
	case ctx.Err() != nil:
		return Errorf(KindCanceled, err, "the request was canceled")
	}
	return fallback
}

// lease takes the chat's lease, waiting up to the sandbox's LeaseWait and
// no later than the admission deadline.
func (r *run) lease(ctx context.Context, deadline time.Time) (func(), error) {
	t0 := time.Now()
	wait := r.a.Sandbox.Spec.LeaseWait
	if r.o.adm != nil {
		wait = min(wait, time.Until(deadline))
	}
	release, err := r.o.leases.Acquire(ctx, r.place.key(), wait)
	r.t.Lease = time.Since(t0)
	switch {
	case errors.Is(err, executor.ErrBusy) && r.client != nil:
		return nil, Errorf(KindBusy, executor.ErrBusy, "the sandbox %q is busy with another request; wait for it to finish and send again", r.client.ID)
	case errors.Is(err, executor.ErrBusy):
		return nil, Errorf(KindBusy, executor.ErrBusy, "the chat %q is busy with another request; wait for it to finish and send again", r.req.ChatID)
	case err != nil:
		return nil, r.failure(ctx, err, AsError(err))
	}
	return release, nil
}

// admit waits for a run slot of the admission control until deadline,
// telling a streaming client where it stands. The returned function frees
// the slot.
func (r *run) admit(ctx context.Context, deadline time.Time) (func(), error) {
	q := r.o.adm
	if q == nil {
		return func() {}, nil
	}
	t0 := time.Now()
	free, err := q.acquire(ctx, r.req.UserID, r.a.Sandbox.Spec.MemoryBytes, deadline, func(qi executor.QueueInfo) error {
		return r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxQueued, Queue: &qi})
	})
	r.t.Queue = time.Since(t0)
	if err != nil {
		if KindOf(err) == KindOverloaded {
			return nil, err
		}
		return nil, r.failure(ctx, err, AsError(err))
	}
	return free, nil
}

// create is executor.Executor.Create within a start slot of the admission
// control.
func (r *run) create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	if q := r.o.adm; q != nil {
		done, err := q.startSlot(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
	}
	return r.o.exec.Create(ctx, spec)
}

// start creates the sandbox, or takes the chat's kept one, and opens the
// model route.
func (r *run) start(ctx context.Context) error {
	t0 := time.Now()
	if r.warm != nil && r.startWarm(ctx) {
		r.t.ContainerStart = time.Since(t0)
		r.log.Debug("continuing in the chat's kept container", "id", r.sb.ID(), "pre_started", r.warm.pre != nil, "took", r.t.ContainerStart)
		return r.open(ctx)
	}
	spec := sessionSpec(r.a.Sandbox.Spec)
	spec.UserID, spec.ChatID, spec.AssistantID = r.place.user, r.place.chat, r.a.ID
	sb, err := r.create(ctx, spec)
	r.t.ContainerStart = time.Since(t0)
	if err != nil {
		switch {
		case errors.Is(err, executor.ErrBusy):
			return Errorf(KindBusy, err, "the chat %q is busy with another request (possibly on another gateway instance); wait for it to finish and send again", r.req.ChatID)
		case errors.Is(err, executor.ErrNoSpace):
			return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox cannot start: its workspace is over its disk or inode quota, or the gateway's disk is nearly full; delete files in the workspace or raise sandbox.max_disk / max_inodes (operators: free disk space)"))
		case errors.Is(err, executor.ErrUnavailable):
			return r.failure(ctx, err, Errorf(KindUnavailable, err, "the gateway's container runtime does not answer, so no sandbox can start; send the request again later (operators: start dockerd)"))
		case errors.Is(err, executor.ErrInvalid):
			return r.failure(ctx, err, Errorf(KindConfig, err, "the assistant's sandbox settings were refused; the gateway's log has the details"))
		}
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox could not start; the gateway's log has the details"))
	}
	r.sb = sb
	r.lifeEnd = t0.Add(spec.Timeout)
	if d, ok := sb.(deadliner); ok {
		r.lifeEnd = d.Deadline()
	}
	r.o.tel.live.Add(1)
	r.log.Debug("sandbox ready", "id", sb.ID(), "took", r.t.ContainerStart)
	return r.open(ctx)
}

// open opens the run's model route and tools in its sandbox.
func (r *run) open(ctx context.Context) error {
	sb := r.sb
	r.environment = r.environmentPrompt(ctx)
	if r.o.models != nil && !r.a.Sandbox.DirectModel {
		ictx := withIdentity(ctx, r.req.UserID, r.req.ChatID)
		var route ModelRoute
		var err error
		if r.warm != nil {
			route, err = r.openWarmRoute(ictx)
		} else {
			route, err = r.o.models.Open(ictx, sb, r.a)
		}
		if err != nil {
			return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox's model route could not open; the gateway's log has the details"))
		}
		r.route = route
	}
	egress, err := r.openEgress(ctx, sb)
	if err != nil {
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox's egress proxy could not open; the gateway's log has the details"))
	}
	r.egress = egress
	if err := r.openTools(sb); err != nil {
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox's tools could not open; the gateway's log has the details"))
	}
	if err := r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxReady}); err != nil {
		return r.failure(ctx, err, nil)
	}
	if r.client != nil {
		if err := r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxConnected, Sandbox: &executor.SandboxInfo{ID: r.client.ID}}); err != nil {
			return r.failure(ctx, err, nil)
		}
	}
	return nil
}

// openTools starts the run's tool session when the gateway serves tools
// (Options.Tools), or takes the one opened for the chat's pre-started CLI.
func (r *run) openTools(sb executor.Sandbox) error {
	if r.o.opts.Tools == nil {
		return nil
	}
	if pre := r.warm.preCLI(); pre != nil && pre.tools != nil {
		take := pre.toolsFor == r.req.UserID+"/"+r.req.ChatID
		if pre.toolsFor == "" {
			// A fresh CLI's session (a pre-warmed client sandbox): this
			// request's chat is the one it serves from now on.
			if err := pre.tools.Bind(r.req.UserID, r.req.ChatID); err != nil {
				r.log.Warn("the pre-started CLI's tool session cannot serve the chat; the turn starts a new CLI", "error", err)
			} else {
				pre.toolsFor, take = r.req.UserID+"/"+r.req.ChatID, true
			}
		}
		if take {
			pre.toolsRelay.set(r.toolEvent)
			r.tools, pre.tools = pre.tools, nil
			return nil
		}
		// Another chat in the same client sandbox: the CLI and its tool
		// session were made for the previous one.
		r.log.Debug("the pre-started CLI was made for another chat; the turn starts a new one")
		pre.discard(r.o.opts.TeardownTimeout)
		r.warm.pre = nil
	}
	s, err := r.openToolSession(sb, r.req.ChatID, r.toolEvent)
	if err != nil {
		return err
	}
	r.tools = s
	return nil
}

// openToolSession opens a tool session on sb for the request's user, the
// chat ("" for one bound later) and the assistant's allowed tools;
// onShellCall hears of the agent's shell tool calls. It returns nil when
// the host serves none of the tools.
func (r *run) openToolSession(sb executor.Sandbox, chat string, onShellCall func(ToolCall)) (ToolSession, error) {
	uid, gid, err := executor.ParseUser(r.a.Sandbox.Spec.User)
	if err != nil {
		return nil, err
	}
	return r.o.opts.Tools.Open(ToolGrant{HostDir: sb.HostDir(), UID: uid, GID: gid, Box: sb, Sandbox: sb.ID(),
		User: r.req.UserID, Chat: chat, Assistant: r.a.ID, AllowedTools: r.a.Sandbox.Run.AllowedTools,
		OnShellCall: onShellCall})
}

// toolEvent streams a gateway tool call that the agent made from its
// shell as a tool use and its result (the agent CLI's stream only shows
// the shell command).
func (r *run) toolEvent(c ToolCall) {
	if !c.Done {
		_ = r.send(executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: c.ID, Name: c.Name, Input: c.Arguments}})
		return
	}
	_ = r.send(executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: c.ID, Content: c.Result, IsError: c.IsError}})
}

// teardown closes the sandbox (windUp has closed the run's routes) on a
// context the caller cannot cancel, bounded by TeardownTimeout.
func (r *run) teardown(ctx context.Context) {
	t0 := time.Now()
	r.endPhase()
	_, span := r.o.tel.tracer.Start(r.tr.ctx, "agentbox.teardown")
	defer span.End()
	defer r.o.tel.live.Add(-1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.opts.TeardownTimeout)
	defer cancel()
	if r.warm != nil {
		r.warm.pre.discard(r.o.opts.TeardownTimeout)
	}
	if err := r.sb.Close(ctx); err != nil {
		r.log.Error("removing the sandbox failed; the executor's reconciler removes it later", "id", r.sb.ID(), "error", err)
	}
	r.t.Teardown = time.Since(t0)
	_ = r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxClosed})
}

// closeRoutes closes the run's tools session and model route.
func (r *run) closeRoutes() {
	if r.tools != nil {
		if err := r.tools.Close(); err != nil {
			r.log.Warn("closing the tools session failed", "error", err)
		}
		r.tools = nil
	}
	if r.egress != nil {
		if err := r.egress.Close(); err != nil {
			r.log.Warn("closing the egress proxy failed", "error", err)
		}
		r.egress = nil
	}
	if r.route != nil {
		if bs, ok := r.route.(budgetStopper); ok {
			r.budgetStop = bs.BudgetStop()
		}
		if err := r.route.Close(); err != nil {
			r.log.Warn("closing the model route failed", "error", err)
		}
		r.route = nil
	}
}

// workspace places the assistant's files in the workspace and its home
// files (skills) in HOME.
func (r *run) workspace(ctx context.Context) error {
	t0 := time.Now()
	defer func() { r.t.Workspace = time.Since(t0) }()
	if err := r.writeFiles(ctx, r.a.Sandbox.Files, "the assistant's file"); err != nil {
		return err
	}
	if r.warm != nil {
		// A kept container's HOME was rebuilt when it was kept.
		return nil
	}
	if err := executor.PlaceHomeFiles(ctx, r.sb, r.home(), r.a.Sandbox.HomeFiles); err != nil {
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the assistant's skills could not be placed in the sandbox's HOME; the gateway's log has the details"))
	}
	return nil
}

// home is the agent's HOME inside the container.
func (r *run) home() string {
	if r.a.Sandbox.Home != "" {
		return r.a.Sandbox.Home
	}
	return DefaultHome
}

// writeFiles writes host-owned files into the workspace in name order,
// restoring each over whatever the agent left in its way when the sandbox
// can (executor.Restorer), so that a planted link does not break the chat.
func (r *run) writeFiles(ctx context.Context, files map[string][]byte, what string) error {
	write := r.sb.WriteFile
	if rs, ok := r.sb.(executor.Restorer); ok {
		write = rs.RestoreFile
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := write(ctx, name, files[name]); err != nil {
			return r.failure(ctx, err, Errorf(KindSandboxStart, err, "%s %q could not be written to the workspace", what, name))
		}
	}
	return nil
}

// createHook builds the hooks' context and runs the Create hook.
func (r *run) createHook(ctx context.Context) ([]executor.Message, error) {
	opts := maps.Clone(r.a.Sandbox.Options)
	if opts == nil {
		opts = map[string]any{}
	}
	maps.Copy(opts, r.req.Options)
	r.hc = &hooks.Context{
		UserID: r.req.UserID, ChatID: r.req.ChatID, AssistantID: r.a.ID,
		Sandbox:    r.sb,
		Emit:       r.send,
		ChatMemory: r.o.memory.For(r.req.UserID, r.req.ChatID),
		Logger:     r.log.Named("hooks"),
		Options:    opts,
	}
	if r.a.Hooks == nil || !r.a.Hooks.HasCreate() {
		return r.req.Messages, nil
	}
	t0 := time.Now()
	messages, err := hooks.RunCreate(ctx, r.a.Hooks, r.hc, slices.Clone(r.req.Messages))
	r.t.CreateHook = time.Since(t0)
	if err != nil {
		var rej *hooks.RejectedError
		msg := err.Error()
		if errors.As(err, &rej) {
			msg = rej.Message
		}
		return nil, r.failure(ctx, err, Errorf(KindHookRejected, err, "%s", msg))
	}
	return messages, nil
}

// finish runs the Next hook over the agent's outcome and builds the
// response.
func (r *run) finish(ctx context.Context, comp *executor.Completion, runErr error) (*Response, error) {
	var e *Error
	if errors.As(runErr, &e) && e.Kind == KindCanceled {
		// The client is gone: Next has nobody to answer.
		return nil, runErr
	}
	final := comp
	if r.a.Hooks != nil && r.a.Hooks.HasNext() && ctx.Err() == nil {
		r.enter("next_hook")
		t0 := time.Now()
		final, runErr = hooks.RunNext(ctx, r.a.Hooks, r.hc, comp, runErr)
		r.t.NextHook = time.Since(t0)
	}
	if runErr != nil {
		r.forgetFailedResume(runErr)
		return nil, runErr
	}
	resp := &Response{Content: final.Content, FinishReason: final.FinishReason, Completion: comp}
	if resp.FinishReason == "" || resp.FinishReason == executor.FinishError {
		resp.FinishReason = executor.FinishStop
	}
	switch {
	case r.route != nil:
		r.settleRoute(ctx)
		resp.Usage = r.route.Usage()
	case comp != nil:
		resp.Usage = comp.Usage
	}
	r.emitMu.Lock()
	resp.Replaced = resp.Content != r.streamed.String()
	r.emitMu.Unlock()
	r.answer, r.answered = resp.Content, true
	return resp, nil
}

// logDone logs the request's outcome, the phase it reached and its
// timings: one line per request. A canceled request is an outcome, not a
// fault: it logs at INFO like the rest, and the phases do not log it again.
func (r *run) logDone(err error) {
	args := []any{"phase", r.phase, "lease", r.t.Lease, "queue", r.t.Queue, "container_start", r.t.ContainerStart, "workspace", r.t.Workspace,
		"create_hook", r.t.CreateHook, "agent", r.t.Agent, "next_hook", r.t.NextHook, "teardown", r.t.Teardown, "total", r.t.Total}
	if err != nil {
		e := AsError(err)
		msg := "sandboxed request failed"
		if e.Kind == KindCanceled {
			msg = "sandboxed request canceled"
		}
		r.log.Info(msg, append(args, "kind", e.Kind, "error", err)...)
		return
	}
	r.log.Info("sandboxed request done", args...)
}

// routeSettler is a ModelRoute that can wait until its calls in flight are
// metered (middleware/modelroute's routes).
type routeSettler interface {
	Settle(ctx context.Context) error
}

// settleRouteWait bounds how long a response waits for a model call still
// in flight after the agent's final result.
const settleRouteWait = time.Second

// settleRoute waits, briefly, for the model route's calls in flight to be
// metered: the agent's last call is metered when its upstream body ends,
// which can be just after its last bytes reached the agent, and the
// response no longer waits for the CLI's exit to read the usage.
func (r *run) settleRoute(ctx context.Context) {
	s, ok := r.route.(routeSettler)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, settleRouteWait)
	defer cancel()
	if err := s.Settle(ctx); err != nil {
		r.log.Warn("a model call was still in flight when the response was sent; the route meters it, the response's usage does not hold it", "error", err)
	}
}
