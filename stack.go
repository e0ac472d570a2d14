package agentbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/executor/local"
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
	// Executor is the sandbox backend: config.ExecutorDocker ("" too),
	// config.ExecutorLocal (bubblewrap on this host, no Docker; it needs
	// HelperBinary) or config.ExecutorKubernetes (pods; see Kubernetes).
	Executor string
	// Kubernetes configures the Kubernetes backend (Executor "kubernetes"):
	// Kubeconfig ("" is the in-cluster account), Namespace, StorageClass
	// for the workspaces' claims, Image defaults, leases. Its Logger is
	// set by New. The pods run their image's helper; HelperBinary does not
	// apply.
	Kubernetes kubernetes.Options
	// HelperBinary, when set, is bind-mounted into every sandbox as its
	// helper (any image works); otherwise the image's own helper runs
	// (agentbox/sandbox-* images carry it).
	HelperBinary string
	// Pool (Docker executor only) keeps this many started containers per
	// sandbox configuration for the first request of new chats
	// (docker.Options.Pool: the gateway must be root on the daemon's
	// host); 0 turns it off.
	Pool int
	// Quota picks how each chat's workspace quota (sandbox.max_disk and
	// max_inodes) is enforced: "" for the executor's default, "watchdog"
	// or "loop". The Docker executor has both (docker.Options.Quota; its
	// default is the watchdog, with no file past max_disk); the kubernetes
	// executor has "watchdog" only (the pod's helper measures); the local
	// executor neither (each file is capped at max_disk, the total is not
	// bounded), so it takes "" alone. New fails for a mode the executor
	// cannot honour.
	Quota string
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
			return newExecutor(ctx, o, log)
		},
		Runners: []executor.Runner{claude.New(), cursor.New()},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(mo), nil
		},
		Egress:         modelroute.NewEgress(o.Egress),
		Logger:         log,
		Admission:      o.Admission,
		MeterProvider:  o.MeterProvider,
		TracerProvider: o.TracerProvider,
		// Beside workspaces/, where executor/docker's retention removes a
		// chat's sessions with its workspace.
		SessionDir: filepath.Join(o.DataDir, "sessions"),
		SandboxDir: filepath.Join(o.DataDir, "client-sandboxes"),
	}
	if o.Tools != nil {
		mwo.Tools = MCPTools(o.Tools)
	}
	if s.Orchestrator, err = middleware.New(ctx, mwo); err != nil {
		return nil, err
	}
	s.http = o.HTTP
	s.http.Handler, s.http.Catalog, s.http.Logger = s.Orchestrator.Handler(), cat, log.Named("http")
	s.http.Environments, s.http.Sandboxes = s.Orchestrator, s.Orchestrator
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

// newExecutor opens the sandbox backend o.Executor names.
func newExecutor(ctx context.Context, o Options, log hclog.Logger) (executor.Executor, error) {
	kind, err := config.ParseExecutor(o.Executor)
	if err != nil {
		return nil, fmt.Errorf("agentbox: Options.Executor: %w", err)
	}
	if kind != config.ExecutorDocker && o.Pool != 0 {
		return nil, fmt.Errorf("agentbox: Options.Pool is a Docker executor option; drop it for the %s executor", kind)
	}
	if err := checkQuota(kind, o); err != nil {
		return nil, err
	}
	if kind == config.ExecutorKubernetes {
		if o.HelperBinary != "" {
			return nil, errors.New("agentbox: Options.HelperBinary does not apply to the kubernetes executor: pods run their image's helper (agentbox/sandbox-* images carry it)")
		}
		ko := o.Kubernetes
		ko.Logger = log
		return kubernetes.New(ctx, ko)
	}
	if kind == config.ExecutorLocal {
		if o.HelperBinary == "" {
			return nil, errors.New("agentbox: the local executor needs Options.HelperBinary: build it with `make helper` (bin/agentbox-helper)")
		}
		e, err := local.New(ctx, local.Options{DataDir: o.DataDir, Logger: log, HelperBinary: o.HelperBinary})
		if err != nil {
			return nil, err
		}
		return e, nil
	}
	return docker.New(ctx, docker.Options{DataDir: o.DataDir, Logger: log,
		HelperBinary: o.HelperBinary, UseImageHelper: o.HelperBinary == "", Pool: o.Pool, Quota: docker.QuotaMode(o.Quota)})
}

// checkQuota refuses a quota mode the executor kind cannot honour (the
// Docker executor checks its own modes in docker.New).
func checkQuota(kind string, o Options) error {
	switch {
	case o.Quota == "" || kind == config.ExecutorDocker:
		return nil
	case kind == config.ExecutorKubernetes && o.Quota == string(docker.QuotaWatchdog):
		if o.Kubernetes.QuotaInterval < 0 {
			return errors.New(`agentbox: Options.Quota is "watchdog" but Options.Kubernetes.QuotaInterval is negative, which turns the pods' watchdog off; drop one of them`)
		}
		return nil
	case kind == config.ExecutorKubernetes:
		return fmt.Errorf(`agentbox: Options.Quota %q: the kubernetes executor enforces workspace quotas with the pod's helper only; use "watchdog" or leave it empty`, o.Quota)
	default:
		return fmt.Errorf(`agentbox: Options.Quota %q: the %s executor caps each file at max_disk and has no quota mode; leave it empty, or use the docker executor for "watchdog" or "loop"`, o.Quota, kind)
	}
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
