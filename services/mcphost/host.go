package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor/helper"
)

// Defaults of Options.
const (
	// DefaultCallTimeout bounds one tool call.
	DefaultCallTimeout = 60 * time.Second
	// DefaultHelloTimeout bounds how long a new connection may take to
	// present its hello.
	DefaultHelloTimeout = 5 * time.Second
	// DefaultMaxConns caps the concurrent connections of one Session.
	DefaultMaxConns = 32
)

// Sentinel errors callers branch on.
var (
	// ErrInvalidTool reports a tool registration that cannot be served.
	ErrInvalidTool = errors.New("mcphost: invalid tool")
	// ErrRefused reports a connection or call the session refused (wrong or
	// expired token, server or tool outside the grant).
	ErrRefused = errors.New("mcphost: refused")
	// ErrCallTimeout reports a handler cut at its deadline.
	ErrCallTimeout = errors.New("mcphost: the tool call passed its deadline")
	// ErrHandlerPanic reports a handler that panicked.
	ErrHandlerPanic = errors.New("mcphost: the tool handler panicked")
)

// Identity is who a request runs for. A Session takes it from its Grant,
// never from a caller's arguments.
type Identity struct {
	User      string `json:"user"`
	Chat      string `json:"chat"`
	Assistant string `json:"assistant"`
}

// Call is one tool call as a Handler sees it.
type Call struct {
	// Identity is the request's, from the token the connection presented.
	Identity Identity
	// Sandbox is the id of the sandbox the call came from.
	Sandbox string
	// Server and Tool name the tool.
	Server, Tool string
	// Arguments is the JSON object the caller sent, already validated
	// against the tool's input schema.
	Arguments json.RawMessage
}

// Result is what a Handler returns to the agent.
type Result struct {
	// Text is the tool's output, shown to the model.
	Text string
	// IsError marks a failure the model should see (and may recover from).
	IsError bool
}

// Handler runs one tool call. ctx ends at the call's deadline and when the
// request ends; a handler that ignores it is abandoned at the deadline.
// A returned error reaches the model as an error result.
type Handler func(ctx context.Context, call *Call) (*Result, error)

// Tool is a tool the gateway registers in Go.
type Tool struct {
	// Name is the tool's name within its server (letters, digits, _ and -).
	Name string
	// Description tells the model what the tool does.
	Description string
	// InputSchema is a JSON Schema of type "object" for the arguments;
	// nil means an object with any properties.
	InputSchema json.RawMessage
	// Handler runs the tool.
	Handler Handler
}

// registered is a Tool with its compiled schema.
type registered struct {
	Tool
	server   string
	schema   map[string]any
	resolved *jsonschema.Resolved
}

// Options configure a Host.
type Options struct {
	// Logger receives one line per connection refusal and per tool call
	// (never tokens or arguments); default: discarded.
	Logger hclog.Logger
	// CallTimeout bounds every tool call (DefaultCallTimeout when 0).
	CallTimeout time.Duration
	// HelloTimeout bounds a connection's hello (DefaultHelloTimeout when 0).
	HelloTimeout time.Duration
	// MaxLine caps one JSON-RPC message (helper.MaxMCPLine when 0).
	MaxLine int
	// MaxConns caps a Session's concurrent connections (DefaultMaxConns
	// when 0).
	MaxConns int
	// Now is the clock of the times a Session reports (time.Now when nil);
	// deadlines always use the real clock.
	Now func() time.Time
}

// Host holds the gateway's tools and opens a Session per sandbox run. It is
// safe for concurrent use; tools registered after a Session opened are seen
// by its later connections.
type Host struct {
	opts    Options
	log     hclog.Logger
	mu      sync.RWMutex
	servers map[string]map[string]*registered
}

// New returns a Host with no tools.
func New(o Options) *Host {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = DefaultHelloTimeout
	}
	if o.MaxLine <= 0 {
		o.MaxLine = helper.MaxMCPLine
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Host{opts: o, log: o.Logger, servers: map[string]map[string]*registered{}}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// validName matches config's rule for server ids and tool names: letters,
// digits, _ and -, no "__" (the separator of mcp__<server>__<tool>).
func validName(s string) bool {
	return nameRE.MatchString(s) && !strings.Contains(s, "__") && len(s) <= 64
}

// Register adds a tool to server (the id in the assistant's mcp.servers).
// It fails with ErrInvalidTool on a bad name, a schema that is not a JSON
// Schema of type "object", a missing handler or a name taken.
func (h *Host) Register(server string, t Tool) error {
	switch {
	case !validName(server):
		return fmt.Errorf("%w: server id %q: use letters, digits, _ and - without \"__\"", ErrInvalidTool, server)
	case !validName(t.Name):
		return fmt.Errorf("%w: tool name %q: use letters, digits, _ and - without \"__\"", ErrInvalidTool, t.Name)
	case t.Handler == nil:
		return fmt.Errorf("%w: tool %s/%s has no Handler", ErrInvalidTool, server, t.Name)
	}
	raw := t.InputSchema
	if len(raw) == 0 {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m["type"] != "object" {
		return fmt.Errorf("%w: tool %s/%s: InputSchema must be a JSON object with \"type\": \"object\"", ErrInvalidTool, server, t.Name)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("%w: tool %s/%s: InputSchema: %w", ErrInvalidTool, server, t.Name, err)
	}
	res, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("%w: tool %s/%s: InputSchema does not resolve: %w", ErrInvalidTool, server, t.Name, err)
	}
	t.InputSchema = raw
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.servers[server] == nil {
		h.servers[server] = map[string]*registered{}
	}
	if h.servers[server][t.Name] != nil {
		return fmt.Errorf("%w: tool %s/%s is registered twice; register each name once", ErrInvalidTool, server, t.Name)
	}
	h.servers[server][t.Name] = &registered{Tool: t, server: server, schema: m, resolved: res}
	return nil
}

// MustRegister is Register that panics, for tools fixed at compile time.
func (h *Host) MustRegister(server string, t Tool) {
	if err := h.Register(server, t); err != nil {
		panic(err)
	}
}

// Servers returns the ids of the servers with tools, sorted.
func (h *Host) Servers() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.servers))
	for s := range h.servers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// granted returns the tools of server the grant allows, sorted by name.
func (h *Host) granted(g *Grant, server string) []*registered {
	allow, ok := g.Allow[server]
	if !ok {
		return nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []*registered
	for name, t := range h.servers[server] {
		if allow == nil || slices.Contains(allow, name) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Grant is what one request may use: its token, identity and allowlist.
type Grant struct {
	// Token is the per-request secret every connection must present;
	// Open generates one when empty.
	Token string
	// Identity is the request's.
	Identity Identity
	// Allow maps a server id to its allowed tool names; a nil slice allows
	// every tool of the server, a server not in the map is refused. See
	// AllowFromTools for Claude Code's mcp__<server>__<tool> names.
	Allow map[string][]string
}

// AllowFromTools builds Grant.Allow from Claude Code's allowed tool names
// (config.Assistant.MCPAllowedTools): "mcp__srv__tool" allows one tool,
// "mcp__srv" every tool of srv; other names are ignored.
func AllowFromTools(names []string) map[string][]string {
	out := map[string][]string{}
	all := map[string]bool{}
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, "mcp__")
		if !ok || rest == "" {
			continue
		}
		srv, tool, hasTool := strings.Cut(rest, "__")
		switch {
		case !hasTool:
			all[srv] = true
			out[srv] = nil
		case !all[srv] && !slices.Contains(out[srv], tool):
			out[srv] = append(out[srv], tool)
		}
	}
	return out
}
