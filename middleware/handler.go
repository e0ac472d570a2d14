package middleware

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Request is one chat request as the gateway hands it over, after the
// adapter decoded its wire format.
type Request struct {
	// AssistantID names the assistant that answers (the OpenAI adapter takes
	// it from the request's "model").
	AssistantID string
	// Messages is the whole conversation; the last one is the user's prompt.
	Messages []executor.Message
	// UserID and ChatID select the chat's workspace. A sandboxed assistant
	// requires both (see executor.ValidateID for the rule); a pass-through
	// request carries them as the gateway got them.
	UserID, ChatID string
	// SandboxID, when set, names the user's client sandbox the request
	// runs in (see Orchestrator.CreateSandbox): its workspace and kept
	// container instead of the chat's; the chat still has its own agent
	// session. An id the user does not hold is KindNotFound.
	SandboxID string
	// Model is the model the client named, kept for the next handler (a
	// gateway that routes plain models by name); the OpenAI adapter sets it
	// to the same value as AssistantID.
	Model string
	// Stream reports that the client reads events as they happen; a Handler
	// emits events either way, and adapters decide what to forward.
	Stream bool
	// StreamOptions are the client's streaming options.
	StreamOptions StreamOptions
	// Options holds the remaining completion options of the client
	// (temperature, max_tokens, ...) as JSON-like values, for hooks and for
	// the next handler. Handlers must not modify it.
	Options map[string]any
}

// StreamOptions are the client's streaming options.
type StreamOptions struct {
	// IncludeUsage asks for the usage in the stream's final chunk.
	IncludeUsage bool
}

// Response is the outcome of one request.
type Response struct {
	// Content is the answer's text. A Handler keeps it equal to the
	// concatenation of the texts of the EventText events it emitted, except
	// when Replaced is set.
	Content string
	// FinishReason is executor.FinishStop or executor.FinishMaxTurns (or
	// what a pass-through handler reported).
	FinishReason string
	// Usage is what the request consumed: the model proxy's metered figures
	// when the run had one, else what the agent CLI reported.
	Usage executor.Usage
	// Replaced reports that a Next hook replaced the content after its text
	// was streamed, so Content no longer equals the streamed text; adapters
	// tell the client (the OpenAI adapter sends an agentbox "replace" event).
	Replaced bool
	// Completion is the agent's own outcome (nil for a pass-through request
	// or when no agent ran); its Usage is the CLI's report.
	Completion *executor.Completion
	// Timings are the durations of the sandbox lifecycle's phases (zero for
	// a pass-through request).
	Timings Timings
}

// Timings are the per-phase durations of a sandboxed request, in the order
// the phases run. A phase that did not run is zero.
type Timings struct {
	// Lease is the wait for the chat's lease (one run per chat at a time).
	Lease time.Duration
	// Queue is the wait for a run slot of the admission control (see
	// Admission).
	Queue time.Duration
	// ContainerStart is executor.Executor.Create: the wait for a start slot
	// (Admission.MaxStarts), workspace directory, container create and
	// start, readiness.
	ContainerStart time.Duration
	// Workspace is placing the assistant's files (skills, MCP config) in
	// the workspace.
	Workspace time.Duration
	// CreateHook and NextHook are the hooks' run times.
	CreateHook time.Duration
	// Agent is the agent CLI's run, from its invocation to its last line.
	Agent    time.Duration
	NextHook time.Duration
	// Teardown is the container's removal (or, with the session policy,
	// its reset and keeping). It runs after the response is returned, so
	// a Response carries 0; the request's log line and metrics have it.
	Teardown time.Duration
	// Total is the whole request, from the middleware's entry to its return.
	Total time.Duration
}

// Emit receives a request's events in order. The middleware never calls it
// from two goroutines at once. An error from Emit (the client went away)
// stops the run: the middleware tears the sandbox down and returns an error
// of KindCanceled.
type Emit func(executor.Event) error

// Handler answers chat requests. Handle streams the request's events to emit
// as they happen and returns the final response, or an error that callers
// classify with KindOf (see Error). Implementations are safe for concurrent
// use.
type Handler interface {
	Handle(ctx context.Context, req *Request, emit Emit) (*Response, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request, emit Emit) (*Response, error)

// Handle implements Handler.
func (f HandlerFunc) Handle(ctx context.Context, req *Request, emit Emit) (*Response, error) {
	return f(ctx, req, emit)
}

// Middleware wraps a Handler, like chi's func(http.Handler) http.Handler.
type Middleware func(next Handler) Handler

// Chain applies middlewares to h so that the first one listed is the
// outermost: Chain(h, a, b) handles a request as a(b(h)).
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// UnknownAssistant is a terminal Handler for gateways without a handler of
// their own behind the middleware: every request it gets fails with
// KindNotFound.
var UnknownAssistant Handler = HandlerFunc(func(_ context.Context, req *Request, _ Emit) (*Response, error) {
	return nil, Errorf(KindNotFound, nil, "the assistant %q does not exist; list the assistants with GET /v1/models", req.AssistantID)
})

var _ Handler = HandlerFunc(nil)
