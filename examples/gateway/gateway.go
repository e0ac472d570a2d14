package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/mcphost"
)

// offlineKey stands in for a connector key that is not configured when the
// gateway runs offline; only the scripted model server sees it.
const offlineKey = "offline-demo-key"

// Options configure a Gateway.
type Options struct {
	// Dir is the gateway directory: assistants/ and connectors/.
	Dir string
	// Addr is the listen address (host:port; port 0 picks a free one).
	Addr string
	// DataDir holds the chats' workspaces and the sandboxes' host
	// directories.
	DataDir string
	// HelperBinary, when set, is bind-mounted into every sandbox as its
	// helper (any image works); otherwise the image's own helper runs.
	// Local mode needs it.
	HelperBinary string
	// Executor is config.ExecutorDocker ("" too), config.ExecutorLocal
	// (bubblewrap sandboxes on this host, no container runtime) or
	// config.ExecutorKubernetes (pods; Kubernetes configures them).
	Executor string
	// Kubernetes configures the pods of the kubernetes executor.
	Kubernetes kubernetes.Options
	// Pool (docker and kubernetes executors) keeps this many started containers or pods per
	// sandbox configuration for new chats' first requests; 0 is off.
	Pool int
	// Quota is the workspace quota mode (docker.Options.Quota): "" for
	// the executor's default, "watchdog" or "loop".
	Quota string
	// Offline decides when connectors use the built-in scripted model
	// server: "auto" for those whose key variable is unset, "always", or
	// "never" (an unset key is then a config error).
	Offline string
	// Logger receives every log line.
	Logger hclog.Logger
	// LookupEnv reads the environment (os.LookupEnv when nil).
	LookupEnv func(string) (string, bool)
	// Admission bounds the sandboxes at once and queues the rest (the zero
	// value derives the bounds from this machine).
	Admission middleware.Admission
	// OTLPEndpoint, when set (http://host:4318), receives the traces over
	// OTLP/HTTP. Metrics are always served on /metrics.
	OTLPEndpoint string
}

// backend is the typed backend choice o's flat fields (the gateway's
// flags) make, refusing a field the chosen backend has no use for.
func (o Options) backend() (agentbox.Backend, error) {
	kind, err := config.ParseExecutor(o.Executor)
	if err != nil {
		return nil, fmt.Errorf("-executor: %w", err)
	}
	if kind == config.ExecutorLocal && o.Pool != 0 {
		return nil, fmt.Errorf("-pool is a docker and kubernetes executor option; drop it for the %s executor", kind)
	}
	if kind != config.ExecutorKubernetes && o.Kubernetes.Successors != 0 {
		return nil, fmt.Errorf("-successors is a kubernetes executor option; drop it for the %s executor, or pass -executor kubernetes", kind)
	}
	switch kind {
	case config.ExecutorKubernetes:
		switch {
		case o.HelperBinary != "":
			return nil, errors.New("-helper does not apply to the kubernetes executor: pods run their image's helper (agentbox/sandbox-* images carry it)")
		case o.Quota != "" && o.Quota != string(docker.QuotaWatchdog):
			return nil, fmt.Errorf(`-quota %q: the kubernetes executor enforces workspace quotas with the pod's helper only; use "watchdog" or leave it empty`, o.Quota)
		case o.Quota != "" && o.Kubernetes.QuotaInterval < 0:
			return nil, errors.New(`-quota is "watchdog" but the kubernetes options' QuotaInterval is negative, which turns the pods' watchdog off; drop one of them`)
		case o.Pool != 0 && o.Kubernetes.Pool != 0 && o.Pool != o.Kubernetes.Pool:
			return nil, fmt.Errorf("-pool %d differs from the kubernetes options' Pool %d; drop one of them", o.Pool, o.Kubernetes.Pool)
		}
		k := o.Kubernetes
		if o.Pool != 0 {
			k.Pool = o.Pool
		}
		return k, nil
	case config.ExecutorLocal:
		if o.Quota != "" {
			return nil, fmt.Errorf(`-quota %q: the local executor caps each file at max_disk and has no quota mode; leave it empty, or use the docker executor for "watchdog" or "loop"`, o.Quota)
		}
		return local.Options{HelperBinary: o.HelperBinary}, nil
	}
	return docker.Options{HelperBinary: o.HelperBinary, Pool: o.Pool, Quota: docker.QuotaMode(o.Quota)}, nil
}

// Gateway is the running example gateway: agentbox's HTTP middleware in
// front of the gateway's own plain path, a reverse proxy to the
// connectors (upstream).
type Gateway struct {
	// URL is the base URL of the HTTP server (http://127.0.0.1:port).
	URL string
	// Model is the scripted model server when some connector runs
	// offline, else nil.
	Model *scriptedapi.Server
	// PlainModel answers Model's OpenAI-compatible /v1/chat/completions,
	// which plain assistants use (see upstream); nil when Model is.
	PlainModel *scriptedopenai.Server
	// CodexModel answers Model's /v1/responses, which the Codex CLI of a
	// codex assistant on an offline openai connector calls; nil when Model
	// is.
	CodexModel *scriptedresponses.Server
	// Config is the loaded gateway directory.
	Config *config.Gateway

	log     hclog.Logger
	stack   *agentbox.Stack
	orch    *middleware.Orchestrator
	catalog middleware.Catalog
	tel     *telemetry
	srv     *http.Server
	done    chan error
	close   sync.Once
	err     error
}

// Start loads the gateway directory, opens Docker, and serves HTTP. What
// it opened is closed again when a later step fails.
func Start(ctx context.Context, o Options) (g *Gateway, err error) {
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Info})
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	g = &Gateway{log: o.Logger, done: make(chan error, 1)}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
			g = nil
		}
	}()
	if g.Config, err = g.load(o); err != nil {
		return g, err
	}
	if g.tel, err = newTelemetry(o.OTLPEndpoint); err != nil {
		return g, err
	}
	tools := mcphost.New(mcphost.Options{Logger: g.log.Named("tools")})
	if err := registerTools(tools); err != nil {
		return g, err
	}
	b, err := o.backend()
	if err != nil {
		return g, err
	}
	g.stack, err = agentbox.New(ctx, agentbox.Options{
		Config: g.Config, DataDir: o.DataDir, Backend: b, HCLogger: g.log.Named("agentbox"),
		Tools: tools, Admission: o.Admission, MeterProvider: g.tel.meters, TracerProvider: g.tel.tracers,
	})
	if err != nil {
		return g, err
	}
	g.orch, g.catalog = g.stack.Orchestrator, g.stack.Catalog
	// agentbox in front of the gateway's own plain path, which knows the
	// plain assistants only: a sandboxed one never runs without its
	// sandbox, whatever reaches it.
	plain := map[string]*config.Assistant{}
	for id, a := range g.Config.Assistants {
		if a.Sandbox == nil {
			plain[id] = a
		}
	}
	api := g.stack.Middleware(newUpstream(plain, g.log.Named("upstream")))
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return g, fmt.Errorf("listen on %s: %w; pass another -addr", o.Addr, err)
	}
	g.URL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.tel.metrics())
	mux.Handle("/", api)
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { g.done <- g.srv.Serve(ln) }()
	ids := slices.Sorted(maps.Keys(g.Config.Assistants))
	g.log.Info("gateway listening", "url", g.URL, "assistants", strings.Join(ids, ","), "data", o.DataDir)
	return g, nil
}

// load reads the gateway directory, pointing connectors whose key is not
// configured at the scripted model server when o.Offline allows it.
func (g *Gateway) load(o Options) (*config.Gateway, error) {
	var missing []string
	env := func(name string) (string, bool) {
		v, ok := o.LookupEnv(name)
		if (!ok || v == "") && o.Offline != "never" || o.Offline == "always" {
			missing = append(missing, name)
			return offlineKey, true
		}
		return v, ok
	}
	if o.Offline != "auto" && o.Offline != "always" && o.Offline != "never" {
		return nil, fmt.Errorf("-offline %q: use auto, always or never", o.Offline)
	}
	cfg, err := config.Load(o.Dir, config.LoadOptions{LookupEnv: env})
	if err != nil {
		return nil, err
	}
	var offline []string
	for _, c := range cfg.Connectors {
		if c.Key.Reveal() != offlineKey || !slices.Contains(missing, c.KeyEnv) {
			continue
		}
		if c.Type == config.ConnectorCursor {
			return nil, fmt.Errorf("connector %q (%s): Cursor's CLI cannot run offline; export %s", c.ID, c.File, c.KeyEnv)
		}
		if g.Model == nil {
			g.PlainModel = scriptedopenai.New(scriptedopenai.WithScript(offlinePlain))
			g.CodexModel = scriptedresponses.New(scriptedresponses.WithScript(offlineCodex))
			g.Model = scriptedapi.Start(scriptedapi.WithScript(offlineScript), scriptedapi.WithChatCompletions(g.PlainModel),
				scriptedapi.WithResponses(g.CodexModel), scriptedapi.WithLogger(g.log.Named("scripted-model")))
		}
		c.Host = g.Model.URL
		if c.Type == config.ConnectorOpenAI {
			// An OpenAI-compatible host is its API base URL, version
			// included.
			c.Host += "/v1"
		}
		offline = append(offline, c.ID)
	}
	if len(offline) > 0 {
		sort.Strings(offline)
		g.log.Warn("========================================================================")
		g.log.Warn("OFFLINE DEMO: no API key for these connectors, so they answer from the")
		g.log.Warn("built-in SCRIPTED model server (canned answers, no real model):")
		for _, id := range offline {
			g.log.Warn("  connector "+describe(cfg.Connectors[id]), "key_env", cfg.Connectors[id].KeyEnv)
		}
		g.log.Warn("export the key variable (or run with -offline=never) to use the real API")
		g.log.Warn("========================================================================")
	}
	return cfg, nil
}

// offlineScript answers the offline demo's agents: "who am I" calls the
// gateway's whoami tool and quotes it; a prompt "$ command" runs command
// with the Bash tool and quotes what it printed; another request gets
// scriptedapi's Demo, which writes hello.txt and runs cat on it.
func offlineScript(r *scriptedapi.Request) scriptedapi.Turn {
	if cmd, ok := strings.CutPrefix(r.UserPrompt(), "$ "); ok {
		if res := r.NewToolResults(); len(res) > 0 {
			return scriptedapi.Say(fmt.Sprintf("`%s` printed:\n%s", cmd, res[len(res)-1].Output()))
		}
		return scriptedapi.Call("Bash", map[string]any{"command": cmd, "description": "Run the user's command", "timeout": 600000})
	}
	if strings.Contains(strings.ToLower(r.AllText()), "who am i") {
		if res := r.NewToolResults(); len(res) > 0 {
			return scriptedapi.Say("The gateway says:\n" + res[len(res)-1].Output())
		}
		return scriptedapi.Call("mcp__gateway__whoami", map[string]any{})
	}
	return scriptedapi.Demo(executor.ContainerWorkdir)(r)
}

// offlineCodex answers the offline demo's Codex CLI as offlineScript
// answers Claude Code: "$ command" runs the command with exec_command,
// "who am i" calls the gateway's whoami tool, and another request gets
// scriptedresponses' Demo, which writes hello.txt with apply_patch and
// runs cat on it.
func offlineCodex(r *scriptedresponses.Request) scriptedresponses.Turn {
	res := r.NewToolResults()
	if cmd, ok := strings.CutPrefix(r.UserPrompt(), "$ "); ok {
		if len(res) > 0 {
			return scriptedresponses.Say(fmt.Sprintf("`%s` printed:\n%s", cmd, res[len(res)-1].CommandOutput()))
		}
		return scriptedresponses.Turn{Calls: []scriptedresponses.Call{scriptedresponses.Shell(cmd)}}
	}
	if strings.Contains(strings.ToLower(r.UserPrompt()), "who am i") {
		// The CLI offers an MCP server's tools as a namespace, or, for a
		// model with tool search, behind its tool_search.
		whoami := scriptedresponses.Call{Name: "whoami", Namespace: "mcp__gateway", Arguments: "{}"}
		switch {
		case len(res) > 0 && res[len(res)-1].Name == "whoami":
			return scriptedresponses.Say("The gateway says:\n" + res[len(res)-1].CommandOutput())
		case len(res) > 0 || r.Offers("mcp__gateway"):
			return scriptedresponses.Turn{Calls: []scriptedresponses.Call{whoami}}
		}
		return scriptedresponses.Turn{Calls: []scriptedresponses.Call{scriptedresponses.SearchTools("whoami")}}
	}
	return scriptedresponses.Demo()(r)
}

// offlinePlain answers a plain assistant's chat request offline with a
// short answer that quotes the prompt, and usage of about one token per
// four bytes of the request.
func offlinePlain(r *scriptedopenai.Request) scriptedopenai.Turn {
	t := scriptedopenai.Say(fmt.Sprintf("(scripted model) You said: %q", strings.TrimSpace(r.LastUserText())))
	t.Usage = &scriptedopenai.Usage{PromptTokens: int64(len(r.Raw)/4 + 1), CompletionTokens: 12}
	return t
}

// Close stops the HTTP server, drains the runs in flight and closes
// Docker and the scripted model server. It is safe to call more than once.
func (g *Gateway) Close() error {
	g.close.Do(func() {
		var errs []error
		// Stop accepting at once; the runs in flight are drained (and
		// cancelled after the middleware's bound) by the Orchestrator.
		var shut chan error
		if g.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), middleware.DefaultDrainTimeout+10*time.Second)
			defer cancel()
			shut = make(chan error, 1)
			go func() { shut <- g.srv.Shutdown(ctx) }()
		}
		if g.orch != nil {
			errs = append(errs, g.orch.Close())
		}
		if shut != nil {
			if err := <-shut; err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			}
			if err := <-g.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs = append(errs, fmt.Errorf("http: %w", err))
			}
		}
		if g.Model != nil {
			g.Model.Close()
		}
		if g.tel != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs = append(errs, g.tel.close(ctx))
		}
		g.err = errors.Join(errs...)
	})
	return g.err
}
