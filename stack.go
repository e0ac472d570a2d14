package agentbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/middleware/openai"
	"github.com/agentbox/agentbox/services/egress"
	"github.com/agentbox/agentbox/services/mcphost"
)

// Options configure New. Dir (or Config) and DataDir are required; the
// rest has working defaults.
type Options struct {
	// Dir is the gateway directory (assistants/ and connectors/), loaded
	// with config.Load and LookupEnv (os.LookupEnv when nil). Config, when
	// set, is used instead: a directory the caller loaded (and perhaps
	// adjusted) itself.
	Dir       string
	LookupEnv func(string) (string, bool)
	Config    *config.Gateway
	// DataDir holds the chats' workspaces, their agent sessions and the
	// sandboxes' host directories (made 0700).
	DataDir string
	// Backend is where the sandboxes run, with that backend's options:
	// docker.Options (the default: its zero value with the image's own
	// helper), local.Options (bubblewrap on this host, no Docker),
	// kubernetes.Options (pods), or Executor(e) for any
	// executor.Executor. Each backend's options are all there: the pool,
	// the quota mode, the Docker host, the kubeconfig... Only the
	// backends a gateway names are linked into it: this package links
	// Docker's and local's; Kubernetes' (client-go) comes with the
	// gateway's own import of executor/kubernetes.
	Backend Backend
	// Retention is how long what a chat leaves is kept after its last
	// request: its workspace (the backend's sweep), its checkpoints and
	// its agent sessions (the middleware's). 0 is executor.DefaultRetention
	// (7 days); negative keeps them forever.
	Retention time.Duration
	// Checkpoints are the gateway's defaults for the workspaces'
	// checkpoints (one per turn, put back when a chat's history returns
	// to an earlier turn): on wherever the backend keeps them, unless
	// Off; an assistant's sandbox.checkpoints wins field by field.
	Checkpoints middleware.Checkpoints
	// Logger receives every log line; HCLogger instead for gateways on
	// hclog. Both nil: nothing is logged.
	Logger   *slog.Logger
	HCLogger hclog.Logger
	// Tools are the gateway's own tools for the agents (optional).
	Tools *mcphost.Host
	// Admission bounds the sandboxes at once and queues the rest (the
	// zero value derives its bounds from this machine).
	Admission middleware.Admission
	// Model configures the model route (budgets, allowed models, caps);
	// its Logger is set by New.
	Model modelroute.Options
	// Egress configures the egress proxies of assistants with
	// sandbox.egress (caps; a resolver for tests); its MeterProvider is
	// MeterProvider's when nil.
	Egress modelroute.EgressOptions
	// MeterProvider and TracerProvider receive the metrics and spans
	// (OpenTelemetry's global providers when nil).
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// HTTP configures the OpenAI-compatible adapter of Middleware and
	// Handler; its Handler, Catalog, Logger and Next are set by New.
	HTTP openai.Options
}

// Stack is agentbox wired from a gateway directory: the Docker executor
// with the in-container helper, the model route that keeps connector keys
// on the host, the MCP relay, the Claude and Cursor runners, the hooks,
// sessions and admission control, and the OpenAI-compatible HTTP adapter.
type Stack struct {
	// Config is the loaded gateway directory.
	Config *config.Gateway
	// Catalog holds its assistants.
	Catalog *middleware.StaticCatalog
	// Orchestrator answers the sandboxed assistants' requests.
	Orchestrator *middleware.Orchestrator

	log  hclog.Logger
	http openai.Options
}

// New loads the gateway directory and wires a working stack. It fails,
// naming what to fix, when an assistant could not run: a config or hook
// error, an assistant whose runner is missing, no Docker daemon. What it
// opened is closed again when a later step fails. Close the Stack when
// done.
func New(ctx context.Context, o Options) (*Stack, error) {
	log := o.HCLogger
	switch {
	case log != nil:
	case o.Logger != nil:
		log = SlogLogger(o.Logger)
	default:
		log = hclog.NewNullLogger()
	}
	if o.DataDir == "" {
		return nil, errors.New("agentbox: Options.DataDir is required: where the chats' workspaces live")
	}
	cfg := o.Config
	if cfg == nil {
		if o.Dir == "" {
			return nil, errors.New("agentbox: Options.Dir (the gateway directory) or Options.Config is required")
		}
		var err error
		if cfg, err = config.Load(o.Dir, config.LoadOptions{LookupEnv: o.LookupEnv}); err != nil {
			return nil, err
		}
	}
	for _, p := range cfg.Problems {
		log.Warn("config: " + p.Error())
	}
	// The helper relays the MCP servers, the model traffic and the tools:
	// the three settings that must agree are made here together.
	cat, err := CatalogFromConfig(cfg, ConfigOptions{MCP: config.HelperRelay})
	if err != nil {
		return nil, fmt.Errorf("agentbox: assistants in %s: %w", cfg.Dir, err)
	}
	s := &Stack{Config: cfg, Catalog: cat, log: log}
	if o.Egress.CA == nil && intercepts(cat) {
		// One CA per gateway, in memory: credentials reach hosts inside
		// the agents' CONNECT tunnels too (executor/egress).
		if o.Egress.CA, err = egress.NewCA(); err != nil {
			return nil, fmt.Errorf("agentbox: %w", err)
		}
	}
	mo := o.Model
	mo.Logger = log.Named("model")
	if o.Egress.MeterProvider == nil {
		o.Egress.MeterProvider = o.MeterProvider
	}
	mwo := middleware.Options{
		Catalog: cat,
		NewExecutor: func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			return newExecutor(ctx, o, sandboxImages(cat), log)
		},
		Runners: []executor.Runner{claude.New(), codex.New(), cursor.New()},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(mo), nil
		},
		Egress:           modelroute.NewEgress(o.Egress),
		Logger:           log,
		Admission:        o.Admission,
		MeterProvider:    o.MeterProvider,
		TracerProvider:   o.TracerProvider,
		SessionDir:       filepath.Join(o.DataDir, "sessions"),
		SessionRetention: o.Retention,
		Checkpoints:      o.Checkpoints,
		SandboxDir:       filepath.Join(o.DataDir, "client-sandboxes"),
	}
	if o.Tools != nil {
		mwo.Tools = MCPTools(o.Tools)
	}
	if s.Orchestrator, err = middleware.New(ctx, mwo); err != nil {
		return nil, err
	}
	s.http = o.HTTP
	s.http.Handler, s.http.Catalog, s.http.Logger = s.Orchestrator.Handler(), cat, log.Named("http")
	s.http.Environments, s.http.Sandboxes, s.http.Checkpoints = s.Orchestrator, s.Orchestrator, s.Orchestrator
	return s, nil
}

// Middleware wraps the gateway's own handler: chat completions for the
// sandboxed assistants are answered by agentbox, every other request
// (other models included) reaches next with its body intact, and
// GET /v1/models lists both.
func (s *Stack) Middleware(next http.Handler) http.Handler {
	return openai.Middleware(s.http)(next)
}

// Handler serves the sandboxed assistants alone (404 for other models).
func (s *Stack) Handler() (http.Handler, error) { return openai.New(s.http) }

// Close drains the runs in flight and releases what New opened.
func (s *Stack) Close() error { return s.Orchestrator.Close() }

// Backend opens the executor of a Stack's sandboxes. docker.Options,
// local.Options and kubernetes.Options are Backends; Executor adapts any
// executor.Executor.
type Backend interface {
	// OpenExecutor opens the executor for a stack whose data directory
	// and retention are s's, logging through log.
	OpenExecutor(ctx context.Context, s executor.Shared, log hclog.Logger) (executor.Executor, error)
}

// Executor is the Backend of an executor the gateway opened itself: New
// uses it as it is, and closes it with the Stack.
func Executor(e executor.Executor) Backend { return openedExecutor{e} }

type openedExecutor struct{ e executor.Executor }

func (o openedExecutor) OpenExecutor(context.Context, executor.Shared, hclog.Logger) (executor.Executor, error) {
	if o.e == nil {
		return nil, errors.New("agentbox: Executor(nil); pass an executor")
	}
	return o.e, nil
}

// newExecutor opens o.Backend, Docker's when it is nil; images are the
// sandbox images of the stack's assistants.
func newExecutor(ctx context.Context, o Options, images []string, log hclog.Logger) (executor.Executor, error) {
	b := o.Backend
	if b == nil {
		b = docker.Options{}
	}
	e, err := b.OpenExecutor(ctx, executor.Shared{DataDir: o.DataDir, Retention: o.Retention, Images: images}, log)
	if err != nil {
		return nil, fmt.Errorf("agentbox: Options.Backend: %w", err)
	}
	return e, nil
}

// sandboxImages lists the images of cat's sandboxed assistants, each
// once, in the catalog's order.
func sandboxImages(cat *middleware.StaticCatalog) []string {
	list, _ := cat.List(context.Background()) // a StaticCatalog's List never fails
	var out []string
	for _, a := range list {
		if a.Sandbox != nil && a.Sandbox.Spec.Image != "" && !slices.Contains(out, a.Sandbox.Spec.Image) {
			out = append(out, a.Sandbox.Spec.Image)
		}
	}
	return out
}

// intercepts reports whether an assistant's egress policy has a
// credential, which needs the gateway's egress CA.
func intercepts(cat *middleware.StaticCatalog) bool {
	list, _ := cat.List(context.Background()) // a StaticCatalog's List never fails
	for _, a := range list {
		if a.Sandbox != nil && a.Sandbox.Egress.Intercepts() {
			return true
		}
	}
	return false
}
