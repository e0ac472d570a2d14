package executor

import (
	"context"
	"encoding/json"
	"io"
	"time"
)

// Message is one turn of the conversation as the gateway received it.
type Message struct {
	Role    string `json:"role"` // "system", "user" or "assistant"
	Content string `json:"content"`
}

// RunRequest is everything a runner needs to build one CLI invocation.
type RunRequest struct {
	// Messages is the whole conversation; the last one is the user's prompt.
	Messages []Message
	// SystemPrompt is the assistant's own instructions (prompts.yml).
	SystemPrompt string
	// Model is the connector's model name.
	Model string
	// Arguments are the assistant's command-specific sandbox arguments
	// (max_turns, permission_mode, allowed_tools, ...).
	Arguments map[string]any
	// Workdir is the workspace path inside the container.
	Workdir string
	// Home is a per-run writable HOME inside the container.
	Home string
	// ModelBaseURL is where the CLI reaches the model from inside the
	// container (the helper's forwarder, e.g. http://127.0.0.1:7000).
	ModelBaseURL string
	// CPUs is the sandbox's CPU quota in cores (Spec.CPUs; 0: the
	// executors' default, DefaultCPUs). A runner may size the CLI's
	// runtime by it.
	CPUs float64
	// APIKey is the per-request token the model proxy accepts; never the
	// connector's real key, except for a runner whose CLI cannot use the
	// model proxy (cursor: cursor-agent talks only to Cursor's service), which
	// gets the connector's key and keeps it in the CLI's process env (see
	// package cursor).
	APIKey string
	// MCPConfig is the content of the MCP configuration, or nil for none.
	MCPConfig []byte
	// AllowedTools are added to the CLI's allowed tools (e.g. MCP tools).
	AllowedTools []string
	// SessionID, when set, has the CLI keep its session transcript under
	// this id (a UUID) instead of running without one: a new session
	// named SessionID holding the whole conversation, or, with Resume, the
	// session SessionID continued with the last message only.
	SessionID string
	// Resume continues the session SessionID, whose transcript the caller
	// placed in Home beforehand.
	Resume bool
	// ForkFrom, with a new SessionID and ResumeAt, starts session SessionID
	// as a copy of session ForkFrom (whose transcript the caller placed in
	// Home) cut after its entry ResumeAt, and continues it with the last
	// message only; ForkFrom itself is left as it was. It is how a client
	// that regenerates an answer or branches after an earlier turn keeps
	// that turn's tool calls and results.
	ForkFrom string
	// ResumeAt is the transcript entry (the CLI's message uuid) ForkFrom is
	// cut after.
	ResumeAt string
}

// Continues reports whether the run continues a stored session (resumed
// or forked), so that only the last message is sent.
func (r RunRequest) Continues() bool { return r.Resume || r.ForkFrom != "" }

// Invocation is one CLI run: argv, environment, stdin and files to place in
// the workspace (relative names) before it starts.
type Invocation struct {
	Args  []string
	Env   []string
	Stdin []byte
	Files map[string][]byte
}

// Runner turns a request into a CLI invocation and the CLI's stdout into
// events and a completion. Implementations: claude, cursor.
type Runner interface {
	// Name is the sandbox "command" this runner serves ("claude").
	Name() string
	// Invocation builds argv, env, stdin and files for one run.
	Invocation(req RunRequest) (Invocation, error)
	// Parse reads the CLI's stdout up to the final result of the
	// invocation's prompt (or to its end), calling emit for each event in
	// order, and returns the completion; the caller drains what follows
	// and waits for the process to exit. A stream without a final result
	// is an error. An error from emit stops parsing and is returned.
	Parse(ctx context.Context, stdout io.Reader, emit func(Event) error) (Completion, error)
}

// EventKind names the kinds of Event.
type EventKind string

// The event vocabulary shared by runners, hooks and the middleware.
const (
	EventInit       EventKind = "init"        // the CLI started: Init
	EventText       EventKind = "text"        // assistant text delta: Text
	EventThinking   EventKind = "thinking"    // assistant thinking delta: Text
	EventToolUse    EventKind = "tool_use"    // the agent called a tool: Tool
	EventToolResult EventKind = "tool_result" // a tool answered: ToolResult
	EventRetry      EventKind = "retry"       // the CLI retries an API call: Text
	EventUI         EventKind = "ui"          // hook UI message: UI
	EventSandbox    EventKind = "sandbox"     // sandbox lifecycle: Text (phase), Queue while "queued"
)

// Event is one thing that happened during a request, in order.
type Event struct {
	Kind       EventKind   `json:"kind"`
	Text       string      `json:"text,omitempty"`
	Init       *InitInfo   `json:"init,omitempty"`
	Tool       *ToolUse    `json:"tool,omitempty"`
	ToolResult *ToolResult `json:"tool_result,omitempty"`
	UI         *UIMessage  `json:"ui,omitempty"`
	Queue      *QueueInfo  `json:"queue,omitempty"`
	// Sandbox details a client sandbox's lifecycle event (EventSandbox
	// "connected", "file_written", "exec"; seed 004).
	Sandbox *SandboxInfo `json:"sandbox,omitempty"`
}

// SandboxInfo is what a client sandbox's lifecycle event reports.
type SandboxInfo struct {
	// ID is the sandbox ("connected").
	ID string `json:"sandbox_id,omitempty"`
	// Path is the file the agent wrote, as it named it ("file_written").
	Path string `json:"path,omitempty"`
	// Command is the shell command the agent ran ("exec"), cut to 1 KiB;
	// ExitCode its exit code when the CLI reported one.
	Command  string `json:"command,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Checkpoint is the workspace checkpoint the request's workspace was
	// put back to ("checkpoint_restored").
	Checkpoint string `json:"checkpoint,omitempty"`
}

// QueueInfo is a waiting request's place in the gateway's queue for a
// sandbox.
type QueueInfo struct {
	// Position is 1 for the request that runs next.
	Position int `json:"position"`
	// WaitedMS is the time since the request arrived, in milliseconds.
	WaitedMS int64 `json:"waited_ms"`
}

// InitInfo is what the CLI reports when it starts.
type InitInfo struct {
	SessionID  string            `json:"session_id,omitempty"`
	Model      string            `json:"model,omitempty"`
	Tools      []string          `json:"tools,omitempty"`
	Skills     []string          `json:"skills,omitempty"`
	MCPServers map[string]string `json:"mcp_servers,omitempty"` // name -> status
	Permission string            `json:"permission_mode,omitempty"`
	Version    string            `json:"version,omitempty"`
}

// ToolUse is a tool call by the agent.
type ToolUse struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// ParentToolUseID is set for a call made by a subagent: the id of the
	// main agent's tool call (Task/Agent) that started the subagent.
	ParentToolUseID string `json:"parent_tool_use_id,omitempty"`
}

// ToolResult is a tool's answer.
type ToolResult struct {
	ToolUseID string `json:"tool_use_id"`
	Content   string `json:"content"`
	IsError   bool   `json:"is_error,omitempty"`
	// ParentToolUseID is set for the result of a subagent's call, as in
	// ToolUse.
	ParentToolUseID string `json:"parent_tool_use_id,omitempty"`
}

// UIMessage is a hook's message to the user (ctx.SendStream/Replace/End).
type UIMessage struct {
	ID     string         `json:"id"`
	Action string         `json:"action"` // "send", "replace" or "end"
	Type   string         `json:"type,omitempty"`
	Props  map[string]any `json:"props,omitempty"`
}

// Usage counts tokens.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:              u.InputTokens + v.InputTokens,
		OutputTokens:             u.OutputTokens + v.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens + v.CacheCreationInputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens + v.CacheReadInputTokens,
	}
}

// Finish reasons of a Completion.
const (
	FinishStop     = "stop"   // the agent finished
	FinishMaxTurns = "length" // the agent hit max_turns
	FinishError    = "error"  // the run failed (IsError)
)

// Completion is the outcome of one agent run. Content is exactly the
// concatenation of the EventText texts emitted during the run.
type Completion struct {
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason"`
	IsError      bool   `json:"is_error"`
	// Subtype is the CLI's result subtype ("success", "error_max_turns", ...).
	Subtype string `json:"subtype,omitempty"`
	// Errors holds the CLI's error texts when IsError.
	Errors []string `json:"errors,omitempty"`
	// APIErrorStatus is the upstream HTTP status of a failed model call.
	APIErrorStatus int           `json:"api_error_status,omitempty"`
	SessionID      string        `json:"session_id,omitempty"`
	NumTurns       int           `json:"num_turns,omitempty"`
	Duration       time.Duration `json:"duration,omitempty"`
	CostUSD        float64       `json:"cost_usd,omitempty"`
	// Usage is what the CLI reported; the middleware puts the model proxy's
	// metered figures beside it.
	Usage             Usage              `json:"usage"`
	PermissionDenials []PermissionDenial `json:"permission_denials,omitempty"`
}

// PermissionDenial is a tool call the CLI refused.
type PermissionDenial struct {
	ToolName  string          `json:"tool_name"`
	ToolUseID string          `json:"tool_use_id"`
	Input     json.RawMessage `json:"tool_input,omitempty"`
}
