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
	// checkpoint is the workspace checkpoint the run started from (nil
	// without checkpoints), for the hooks.
	checkpoint *hooks.Checkpoint
	// egress is the run's egress proxy (nil without sandbox.egress).
	egress io.Closer
	// budgetStop is the budget that stopped the model route's traffic,
	// and modelBase where the agent reached it, kept when the route
	// closes (modelproxy.BudgetCalls and the rest).
	budgetStop, modelBase string

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
	var tail func(outcome error)
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
				tail(outcome)
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

	tail, err = r.acquire(ctx)
	if err != nil {
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
	n := len(req.Messages) - 1
	last := req.Messages[n]
	if last.Role != "user" {
		return &Error{Kind: KindBadRequest, Param: "messages",
			Message: fmt.Sprintf("the last message has role %q; a sandboxed assistant answers a user message, so end the conversation with one", last.Role)}
	}
	// Every runner refuses an empty prompt; said here, it is the client's
	// 400 before a sandbox starts, not the runner's refusal after.
	if strings.TrimSpace(last.Content) == "" {
		return &Error{Kind: KindBadRequest, Param: fmt.Sprintf("messages[%d].content", n),
			Message: fmt.Sprintf("the last user message (messages[%d]) has no text; send the text the assistant should answer", n)}
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
// restoring each over whatever the agent left in its way when the backend
// can (Capabilities.Restore), so that a planted link does not break the
// chat.
func (r *run) writeFiles(ctx context.Context, files map[string][]byte, what string) error {
	write := r.sb.WriteFile
	if rs, ok := r.sb.(executor.Restorer); r.o.caps.Restore && ok {
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
		Checkpoint: r.checkpoint,
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
