package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Kind classifies a failed request so that adapters choose a status and
// callers decide whether to retry.
type Kind string

// The kinds of Error. Adapters map each to one status (the OpenAI adapter's
// map is in its package documentation).
const (
	// KindInternal: a bug or an unexpected failure; the log has details.
	KindInternal Kind = "internal"
	// KindBadRequest: the request is malformed (missing chat id, empty
	// conversation, ...); sending it again fails again.
	KindBadRequest Kind = "bad_request"
	// KindNotFound: no assistant has the requested id.
	KindNotFound Kind = "not_found"
	// KindConfig: the assistant's configuration cannot serve the request
	// (unknown runner, invalid arguments); the operator must fix it.
	KindConfig Kind = "config"
	// KindBusy: another request holds the chat; nothing ran.
	KindBusy Kind = "busy"
	// KindUnavailable: the middleware is shutting down; nothing ran.
	KindUnavailable Kind = "unavailable"
	// KindOverloaded: the gateway is at its sandbox capacity (the queue is
	// full or the wait passed Admission.MaxWait); nothing ran, and
	// Error.RetryAfter says when to send the request again.
	KindOverloaded Kind = "overloaded"
	// KindSandboxStart: the sandbox could not be created or started.
	KindSandboxStart Kind = "sandbox_start"
	// KindSandboxGone: the sandbox's container went away mid-run (removed
	// by an operator, killed, the container runtime restarted); the
	// workspace is kept, and what the agent did before is not undone.
	KindSandboxGone Kind = "sandbox_gone"
	// KindHookRejected: the assistant's Create hook refused the request.
	KindHookRejected Kind = "hook_rejected"
	// KindAgent: the agent CLI failed (error result, crash, no result).
	KindAgent Kind = "agent"
	// KindTimeout: the run passed its time limit (the sandbox timeout or the
	// runner's stall watchdog).
	KindTimeout Kind = "timeout"
	// KindCanceled: the caller went away (context canceled, Emit failed).
	KindCanceled Kind = "canceled"
)

// retrySafe lists the kinds after which nothing ran that a retry would
// repeat (no container started, no agent ran), so a client may send the
// same request again.
var retrySafe = map[Kind]bool{KindBusy: true, KindUnavailable: true, KindOverloaded: true}

// Error is a failed request. Message is fit for the client and says what to
// do next; Err is the cause, for logs (it may name hosts, paths and
// container ids).
type Error struct {
	Kind Kind
	// Message is the client-facing text.
	Message string
	// Param names the request field at fault ("model", "messages"), when
	// one is.
	Param string
	// Retry reports that sending the same request again is safe: nothing
	// ran. Sandbox, agent and timeout failures are never retry-safe, so
	// clients do not re-run expensive jobs.
	Retry bool
	// RetryAfter, when positive, is how long the client should wait before
	// it sends the request again (adapters send it as Retry-After).
	RetryAfter time.Duration
	// Err is the cause, or nil.
	Err error
}

// Errorf returns an *Error of kind with a formatted client message and the
// cause err (which may be nil). Retry is set from the kind.
func Errorf(kind Kind, err error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Retry: retrySafe[kind], Err: err}
}

// Error implements error: the client message and, after a colon, the cause.
func (e *Error) Error() string {
	if e.Err == nil {
		return e.Message
	}
	return e.Message + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same kind with no message,
// so that errors.Is(err, &Error{Kind: KindBusy}) works as a kind check.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Message == "" && t.Kind == e.Kind
}

// KindOf classifies err: the Kind of the first *Error in its chain;
// KindCanceled for context.Canceled, KindTimeout for
// context.DeadlineExceeded and executor.ErrTimeout, KindBusy for
// executor.ErrBusy; KindInternal otherwise. A nil error has no kind ("").
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	return AsError(err).Kind
}

// AsError returns err as an *Error, classifying errors that are not one as
// KindOf describes. The message of an unclassified error does not repeat
// its text, which may carry internal details.
func AsError(err error) *Error {
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.Canceled):
		return Errorf(KindCanceled, err, "the request was canceled")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, executor.ErrTimeout):
		return Errorf(KindTimeout, err, "the request timed out")
	case errors.Is(err, executor.ErrBusy):
		return Errorf(KindBusy, err, "the chat is busy with another request; wait for it to finish and send again")
	default:
		return Errorf(KindInternal, err, "internal error; the gateway's log has the details")
	}
}

// loggedError is a request's failure that the Orchestrator logs as the
// request's one line (run.logDone).
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// Logged reports whether err is a request's outcome that the middleware
// logs itself (one line per request, at INFO), so that an adapter logs it
// again at DEBUG only.
func Logged(err error) bool {
	var l loggedError
	return errors.As(err, &l)
}
