package middleware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/services/egress"
	"github.com/agentbox/agentbox/services/modelproxy"
)

// ErrUnknownAssistant is what a Catalog's Lookup returns (wrapped or not)
// for an id it does not hold. The middleware then passes the request to the
// next handler unchanged, which may know the id (a plain model, say).
var ErrUnknownAssistant = errors.New("middleware: unknown assistant")

// Assistant is what the middleware needs to know of one assistant.
// Values are shared by concurrent requests and must not change after they
// are handed to the middleware.
type Assistant struct {
	// ID is the assistant's id, what clients name as the model.
	ID string
	// Name is a human-readable name, for listings.
	Name string
	// Sandbox is the assistant's sandbox block; nil means a plain assistant
	// whose requests go to the next handler unchanged.
	Sandbox *Sandbox
	// Hooks are the assistant's Create and Next hooks, or nil.
	Hooks hooks.Hooks
}

// Sandbox is an assistant's sandbox block, resolved: which runner answers,
// the sandbox to create and what the runner gets.
type Sandbox struct {
	// Runner names the executor.Runner that answers ("claude", "cursor").
	Runner string
	// Spec is the sandbox to create; the middleware fills in UserID, ChatID
	// and AssistantID per request. Spec.Timeout also bounds the request
	// from the lease to the Next hook. Spec.IdleTTL > 0 is the session
	// policy: the chat's container is kept between requests (see warm.go).
	Spec executor.Spec
	// Files are placed in the workspace before every run, by relative name.
	// Each is restored over whatever the agent left in its way (a link, a
	// FIFO, a directory: see executor.Workspace.RestoreFile), but the agent
	// can change them during the run and the next run reads what it left
	// beside them: settings and skills belong in HomeFiles.
	Files map[string][]byte
	// HomeFiles are placed in the agent's HOME before every run, by name
	// relative to it (the assistant's skills under
	// .claude/skills/<name>/..., where Claude Code reads user skills).
	// HOME lives as long as the container, so nothing the agent changes
	// there reaches a later run, and the runner loads settings from there
	// only (claude: --setting-sources=user).
	HomeFiles map[string][]byte
	// Home is the agent's HOME inside the container ("/home/agent" when
	// empty): per run, since the container is per run, or rebuilt after
	// each run when the session policy keeps the container.
	Home string
	// StallTimeout stops the agent when its stdout stays silent this long
	// (the runner's stall watchdog: a model that stopped answering); 0
	// means no watchdog. Mind tool calls that print nothing for long.
	StallTimeout time.Duration
	// MaxOutput caps the agent's stdout and stderr, each (Cmd.MaxOutput);
	// 0 means the executor's default. The stdout is parsed as it streams,
	// so a large cap costs no memory.
	MaxOutput int64
	// Checkpoints configure the checkpoints of the assistant's
	// workspaces (sandbox.checkpoints): Off, or bounds per workspace.
	Checkpoints Checkpoints
	// Run is the template of the runner's request: SystemPrompt, Model,
	// Arguments, MCPConfig and AllowedTools are taken from it; Messages,
	// Workdir, Home, ModelBaseURL and APIKey are set per request.
	Run executor.RunRequest
	// Options are passed to the hooks as their third argument, merged under
	// the request's own options.
	Options map[string]any
	// Connector is where the model route forwards the agent's model calls
	// (middleware/modelroute). Its key stays on the host, unless DirectModel.
	Connector Connector
	// Budget overrides, per field, the per-request model budget the
	// model route derives (package.yao sandbox.budget); zero fields keep
	// the derived default.
	Budget modelproxy.Budget
	// DirectModel is for agent CLIs that cannot use a local model endpoint
	// (Cursor's): no model route is opened, the runner gets the connector's
	// real key as RunRequest.APIKey and its host as ModelBaseURL, the
	// sandbox needs network egress, and usage is the CLI's own report.
	DirectModel bool
	// OmitEnvironment leaves the sandbox's environment summary out of the
	// agent's system prompt (package.yao sandbox.environment_prompt:
	// false). Otherwise, when the executor takes snapshots
	// (executor.EnvironmentProber), every run appends the summary of its
	// image and options (executor.Environment.Summary) to the prompt.
	OmitEnvironment bool
	// Egress is the allowlist of the run's egress proxy (package.yao
	// sandbox.egress); nil means none, and then Spec.Egress is false and
	// the container has no way out besides its Network.
	Egress *egress.Policy
}

// Connector is an assistant's model endpoint.
type Connector struct {
	// Upstream is the base URL of the model API (https://api.anthropic.com).
	Upstream string
	// Key is the connector's real API key. It never enters the container:
	// the agent gets a per-request token that only the host's proxy takes.
	Key string
	// Translate, when set, says Upstream does not speak the agent's
	// protocol: it returns the transport the model route reaches Upstream
	// with for one run, e.g. executor/modelproxy/anthropicopenai's
	// translation of the Claude CLI's Anthropic calls to an
	// OpenAI-compatible Chat Completions API (the agentbox package sets it
	// for connectors of type "openai"). It gets the connector, the run's
	// model, the route's own transport (nil: http.DefaultTransport) and
	// the run's logger.
	Translate func(c Connector, model string, base http.RoundTripper, log hclog.Logger) (http.RoundTripper, error)
}

// Catalog is the gateway's set of assistants, typically loaded by package
// config. Implementations are safe for concurrent use.
type Catalog interface {
	// Lookup returns the assistant with the id, or an error wrapping
	// ErrUnknownAssistant when there is none.
	Lookup(ctx context.Context, id string) (*Assistant, error)
	// List returns every assistant, sorted by id.
	List(ctx context.Context) ([]*Assistant, error)
}

// StaticCatalog is a Catalog over a fixed set of assistants.
type StaticCatalog struct {
	byID map[string]*Assistant
	list []*Assistant
}

var _ Catalog = (*StaticCatalog)(nil)

// NewCatalog returns a StaticCatalog of the assistants. Ids must be
// non-empty and unique.
func NewCatalog(assistants ...*Assistant) (*StaticCatalog, error) {
	c := &StaticCatalog{byID: make(map[string]*Assistant, len(assistants))}
	var errs []error
	for i, a := range assistants {
		switch {
		case a == nil:
			errs = append(errs, fmt.Errorf("assistant %d is nil; drop it from the list", i))
		case a.ID == "":
			errs = append(errs, fmt.Errorf("assistant %d has no id; set Assistant.ID", i))
		case c.byID[a.ID] != nil:
			errs = append(errs, fmt.Errorf("assistant id %q is used twice; ids must be unique", a.ID))
		default:
			c.byID[a.ID] = a
			c.list = append(c.list, a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("middleware: catalog: %w", err)
	}
	sort.Slice(c.list, func(i, j int) bool { return c.list[i].ID < c.list[j].ID })
	return c, nil
}

// Lookup implements Catalog.
func (c *StaticCatalog) Lookup(_ context.Context, id string) (*Assistant, error) {
	if a := c.byID[id]; a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownAssistant, id)
}

// List implements Catalog.
func (c *StaticCatalog) List(context.Context) ([]*Assistant, error) {
	return append([]*Assistant(nil), c.list...), nil
}

// ModelRouter opens the route by which one run's agent reaches the model:
// on the host, a model proxy that accepts a per-request token and swaps in
// the connector's key (package executor/modelproxy); in the container, the
// helper's forwarder. Implementations are safe for concurrent use.
type ModelRouter interface {
	// Validate refuses, at New, an assistant whose routes it cannot open
	// in the sandboxes of a backend with caps (modelroute's Router needs
	// caps.ModelRelay): what Open relies on is then known to hold.
	Validate(a *Assistant, caps executor.Capabilities) error
	// Open starts the route for one run in sb.
	Open(ctx context.Context, sb executor.Sandbox, a *Assistant) (ModelRoute, error)
	// OpenToken is Open for a token chosen beforehand: the session
	// policy's CLI, started before its request, has it in its
	// environment. A router that cannot returns an error wrapping
	// errors.ErrUnsupported, and that CLI is replaced by one the request
	// starts.
	OpenToken(ctx context.Context, sb executor.Sandbox, a *Assistant, tok string) (ModelRoute, error)
	// OpenWarmUp answers, between requests, the warm-up call of a CLI
	// started with tok, itself and without the upstream, so that the CLI
	// does a first call's work before its message (warmUpRunner). An
	// error leaves the CLI without a warm-up.
	OpenWarmUp(ctx context.Context, sb executor.Sandbox, a *Assistant, tok string) (io.Closer, error)
}

// ModelRoute is one run's route to the model.
type ModelRoute interface {
	// BaseURL is where the agent reaches the model from inside the
	// container (executor.RunRequest.ModelBaseURL).
	BaseURL() string
	// Token is the per-request key the route accepts
	// (executor.RunRequest.APIKey); never the connector's key.
	Token() string
	// Usage is the usage metered so far.
	Usage() executor.Usage
	// Close stops the route; the middleware calls it before the sandbox's
	// Close.
	Close() error
}
