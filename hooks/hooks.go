package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/executor"
	"github.com/hashicorp/go-hclog"
)

// Hooks is an assistant's pair of hooks. The middleware never calls the
// methods directly: it calls RunCreate and RunNext, which apply these rules.
//
//  1. Create runs once per request, after the sandbox is ready and before
//     the agent starts; Next runs once, after the agent finished or failed
//     and before the sandbox is closed. Both get the same *Context.
//  2. Either hook may be absent: HasCreate/HasNext report it, and an absent
//     hook is a no-op that keeps the conversation or the response.
//  3. Create returning a nil *CreateResult, or one with nil Messages, keeps
//     the conversation; non-nil Messages replace it for the agent.
//  4. Create returning an error rejects the request: RunCreate returns a
//     *RejectedError (errors.Is(err, ErrRejected)), the agent and Next do not
//     run, and the caller still closes the sandbox.
//  5. Next receives the agent's completion and error; a nil *NextResult
//     keeps the default response, a non-nil one replaces its content (and
//     finish reason when set) while usage stays what was measured; when
//     the agent failed, a replacement answers the request instead of the
//     error.
//  6. An error from Next is logged and does not fail the request: the
//     default response stands.
//  7. Each invocation is bounded by the hook budget (hook_timeout); passing
//     it is an error wrapping executor.ErrTimeout, so rule 4 or 6 applies.
//  8. Implementations are safe for concurrent use, and nothing one
//     invocation does is visible to the next except through
//     Context.ChatMemory and the workspace.
type Hooks interface {
	// HasCreate reports whether the assistant defines Create.
	HasCreate() bool
	// HasNext reports whether the assistant defines Next.
	HasNext() bool
	// Create runs the Create hook over the conversation.
	Create(ctx context.Context, hc *Context, messages []executor.Message) (*CreateResult, error)
	// Next runs the Next hook over the agent's outcome.
	Next(ctx context.Context, hc *Context, payload NextPayload) (*NextResult, error)
}

// ErrRejected marks a request that the Create hook refused. The caller
// answers the client with the hook's message (RejectedError.Message).
var ErrRejected = errors.New("hooks: request rejected by the Create hook")

// RejectedError is the error RunCreate returns when Create threw. Message is
// what the hook said (e.g. "Node.js is required"), fit for the client; Err
// is the full cause with its source position, fit for logs.
type RejectedError struct {
	Message string
	Err     error
}

// Error implements error.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("request rejected by the Create hook: %s", e.Message)
}

// Unwrap lets errors.Is find both ErrRejected and the cause
// (executor.ErrTimeout when the hook passed its budget).
func (e *RejectedError) Unwrap() []error { return []error{ErrRejected, e.Err} }

// CreateResult is what Create returned.
type CreateResult struct {
	// Messages replaces the conversation when non-nil.
	Messages []executor.Message `json:"messages"`
}

// NextPayload is what Next receives: the completion (nil when the agent
// produced none) and the agent's error ("" when it succeeded).
type NextPayload struct {
	Completion *executor.Completion `json:"completion"`
	Error      string               `json:"error"`
}

// NextResult is what Next returned to replace the response: in JavaScript,
// {content: string, finish_reason?: string}.
type NextResult struct {
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// HookError is an error thrown by a hook script, with the position the
// script threw from (file:line:col of the author's source).
type HookError struct {
	// Hook is "Create" or "Next".
	Hook string
	// Message is what the script threw, as text.
	Message string
	// Position is "src/index.ts:12:11" or "" when unknown.
	Position string
	// Err is the Go error behind the throw, when a Go callback failed or the
	// budget passed; nil for a plain script throw.
	Err error
}

// Error implements error.
func (e *HookError) Error() string {
	s := e.Hook + " hook: " + e.Message
	if e.Position != "" {
		s += " (at " + e.Position + ")"
	}
	return s
}

// Unwrap returns the Go error behind the throw.
func (e *HookError) Unwrap() error { return e.Err }

// RunCreate runs h.Create under the rules of Hooks and returns the
// conversation the agent gets. h may be nil (no hooks).
func RunCreate(ctx context.Context, h Hooks, hc *Context, messages []executor.Message) ([]executor.Message, error) {
	if h == nil || !h.HasCreate() {
		return messages, nil
	}
	res, err := h.Create(ctx, hc, messages)
	if err != nil {
		msg := err.Error()
		var he *HookError
		if errors.As(err, &he) {
			msg = he.Message
		}
		hc.logger().Warn("Create hook rejected the request", "error", err)
		return nil, &RejectedError{Message: msg, Err: err}
	}
	if res == nil || res.Messages == nil {
		return messages, nil
	}
	return res.Messages, nil
}

// RunNext runs h.Next under the rules of Hooks and returns the response the
// request answers with: the agent's (completion, runErr) unless Next
// replaced it. h may be nil (no hooks).
func RunNext(ctx context.Context, h Hooks, hc *Context, completion *executor.Completion, runErr error) (*executor.Completion, error) {
	if h == nil || !h.HasNext() {
		return completion, runErr
	}
	payload := NextPayload{Completion: completion}
	if runErr != nil {
		payload.Error = runErr.Error()
	}
	res, err := h.Next(ctx, hc, payload)
	if err != nil {
		hc.logger().Error("Next hook failed; keeping the default response", "error", err)
		return completion, runErr
	}
	if res == nil {
		return completion, runErr
	}
	out := executor.Completion{FinishReason: executor.FinishStop}
	if completion != nil {
		out = *completion
		out.IsError = false
		out.Errors = nil
		if out.FinishReason == executor.FinishError {
			out.FinishReason = executor.FinishStop
		}
	}
	out.Content = res.Content
	if res.FinishReason != "" {
		out.FinishReason = res.FinishReason
	}
	return &out, nil
}

// Context is the per-request state both hooks see. The middleware builds
// one per request; zero fields are valid (nil Sandbox: no sandbox; nil
// Emit: UI messages are dropped; nil stores: fresh empty ones; nil Logger:
// discarded).
type Context struct {
	// UserID, ChatID and AssistantID identify the request (ctx.user_id,
	// ctx.chat_id, ctx.assistant_id in JavaScript).
	UserID, ChatID, AssistantID string
	// Sandbox is the request's sandbox, or nil when the assistant has none
	// (ctx.sandbox is then null).
	Sandbox executor.Sandbox
	// Emit receives the hooks' UI messages (Kind EventUI) in order.
	Emit func(executor.Event) error
	// RequestMemory is ctx.memory.context: it lives for this request and is
	// shared by Create and Next.
	RequestMemory Store
	// ChatMemory is ctx.memory.chat: it survives across the chat's requests
	// (see ChatMemory).
	ChatMemory Store
	// Logger receives log.* and console.* output.
	Logger hclog.Logger
	// Options is the request's completion options, passed to both hooks as
	// their third argument (JSON-like values).
	Options map[string]any
	// Checkpoint is the workspace checkpoint the run started from
	// (ctx.checkpoint, frozen), or nil when the assistant keeps none.
	Checkpoint *Checkpoint
}

// Checkpoint is the workspace checkpoint a run started from, as hooks see
// it: its id and label (a conversation hash, "start", ...), whether the
// workspace was put back to it for this request, and whether the history
// returned to a point whose checkpoint is gone (the run then started from
// the current files, last taken as ID).
type Checkpoint struct {
	ID       string `json:"id"`
	Label    string `json:"label"`
	Restored bool   `json:"restored"`
	Missing  bool   `json:"missing"`
}

// Stores returns the request and chat memories, setting fresh bounded
// in-memory stores in place of nil ones (so Create and Next share the
// request memory even when the caller left it nil). Not safe for concurrent
// use: the hooks of one request run one after the other.
func (hc *Context) Stores() (request, chat Store) {
	if hc.RequestMemory == nil {
		hc.RequestMemory = NewMemoryStore(DefaultMaxKeys, DefaultMaxBytes)
	}
	if hc.ChatMemory == nil {
		hc.ChatMemory = NewMemoryStore(DefaultMaxKeys, DefaultMaxBytes)
	}
	return hc.RequestMemory, hc.ChatMemory
}

func (hc *Context) logger() hclog.Logger {
	if hc == nil || hc.Logger == nil {
		return hclog.NewNullLogger()
	}
	return hc.Logger
}

// Store is a small key/value memory whose values are JSON documents, so a
// value read back is always a fresh copy and never aliases a runtime's
// objects.
type Store interface {
	// Get returns the value of key, or ok false when it is not set.
	Get(key string) (value json.RawMessage, ok bool)
	// Set stores value (a valid JSON document) under key. It fails with
	// ErrMemoryFull past the store's caps.
	Set(key string, value json.RawMessage) error
	// Del removes key; removing a missing key is not an error.
	Del(key string)
}
