package codex

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/runnerkit"
)

// DefaultProgram is the CLI's executable, searched on the sandbox's PATH.
const DefaultProgram = "codex"

// ProviderID is the name of the model provider the runner configures: the
// sandbox's model relay, speaking the Responses API.
const ProviderID = "agentbox"

// TokenEnv is the environment variable the provider reads its key from
// (env_key): the per-request token, never the connector's key.
const TokenEnv = "AGENTBOX_MODEL_TOKEN"

// Limits and defaults of the invocation.
const (
	// maxArg is the longest argv element we build. Linux caps one element
	// at 128 KiB (MAX_ARG_STRLEN); stay clear of it.
	maxArg = 96 << 10
	// DefaultMaxRetries bounds the CLI's own retries of a failed model
	// request and of a broken stream (the provider's request_max_retries
	// and stream_max_retries): its defaults (4 and 5) take a dead upstream
	// tens of seconds to give up on.
	DefaultMaxRetries = 2
	// maxRetriesCap is the most retries an assistant may ask for.
	maxRetriesCap = 5
	// minContextWindow and maxContextWindow bound the context_window
	// argument.
	minContextWindow = 4096
	maxContextWindow = 10_000_000
)

// defaultPath is PATH for the CLI: the image's tools live in these, after
// /opt/agentbox/bin, where executor/docker mounts a host-provided helper
// (agentbox-helper for the MCP relay, abx for the agent's tools).
const defaultPath = "/opt/agentbox/bin:/usr/local/bin:/usr/bin:/bin"

// DisabledFeatures are the CLI's feature flags every run turns off
// (--disable), each because it would reach the network beside the model
// proxy, run what the workspace or HOME plants, or start work no user
// asked for. Verified on 0.169.0 and 0.171.0, which refuse an unknown flag.
var DisabledFeatures = []string{
	// plugins: at start-up `git ls-remote https://github.com/openai/plugins.git`.
	"plugins",
	// apps and tool_suggest: ChatGPT connectors, which need OpenAI's
	// backend.
	"apps", "tool_suggest",
	// hooks: commands from hooks.json files run around the turn; the
	// gateway's hooks are its own (package hooks).
	"hooks",
	// goals: a goal continues with turns of its own after the answer.
	"goals",
	// multi_agent: subagents in threads of their own, outside the run's
	// accounting of tool calls.
	"multi_agent",
	// skill_mcp_dependency_install: a skill may name an MCP server to
	// install and start; a skill is text the model reads, never a command.
	"skill_mcp_dependency_install",
	// memories: notes kept across sessions in HOME, outside the chat's
	// session.
	"memories",
	// enable_request_compression: the model proxy reads every body once,
	// strictly, and refuses a compressed one.
	"enable_request_compression",
}

// Runner builds Codex CLI invocations and parses their output. The zero
// value is not ready; use New.
type Runner struct {
	program string
	maxLine int
	logger  hclog.Logger
}

// interface guard
var _ executor.Runner = (*Runner)(nil)

// Option configures a Runner.
type Option func(*Runner)

// WithLogger sets the logger (default: a null logger).
func WithLogger(l hclog.Logger) Option {
	return func(r *Runner) {
		if l != nil {
			r.logger = l
		}
	}
}

// WithProgram sets argv[0] (default DefaultProgram).
func WithProgram(program string) Option {
	return func(r *Runner) {
		if program != "" {
			r.program = program
		}
	}
}

// WithMaxLine caps one line of the CLI's output in bytes (default
// jsonl.DefaultMaxLine); a longer line fails the parse.
func WithMaxLine(n int) Option { return func(r *Runner) { r.maxLine = n } }

// New returns a Runner.
func New(opts ...Option) *Runner {
	r := &Runner{program: DefaultProgram, logger: hclog.NewNullLogger()}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Name implements executor.Runner: the sandbox command "codex".
func (r *Runner) Name() string { return "codex" }

// Arguments are the assistant's sandbox arguments the codex runner
// understands, decoded from RunRequest.Arguments.
type Arguments struct {
	// ModelProfile is the model the CLI believes it talks to (-m): its
	// tools (apply_patch), instructions and context window come from the
	// CLI's catalog entry of that name. Empty: the connector's model. The
	// model proxy pins the connector's model whatever the CLI names.
	ModelProfile string
	// ContextWindow overrides the profile's context window in tokens
	// (model_context_window), for a connector model smaller than the
	// profile; 0 keeps the profile's.
	ContextWindow int
	// MaxRetries is the provider's request_max_retries and
	// stream_max_retries (default DefaultMaxRetries, at most 5).
	MaxRetries int
	// Sessions keeps the CLI's session between turns when the gateway
	// does (default true).
	Sessions bool
}

// argumentKeys lists the keys ParseArguments accepts.
var argumentKeys = []string{"context_window", "max_retries", "model_profile", "sessions"}

// profilePattern is what a model profile may look like: a model slug.
var profilePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// ParseArguments decodes and validates the assistant's sandbox arguments.
// Unknown keys and bad values are errors wrapping executor.ErrInvalid that
// name the key and what it accepts.
func ParseArguments(args map[string]any) (Arguments, error) {
	a := Arguments{MaxRetries: DefaultMaxRetries, Sessions: true}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []string
	for _, k := range keys {
		v := args[k]
		var err error
		switch k {
		case "model_profile":
			s, ok := v.(string)
			if !ok || !profilePattern.MatchString(s) {
				err = fmt.Errorf("is %v; use a model name the Codex CLI knows, e.g. \"gpt-5.5\"", v)
			}
			a.ModelProfile = s
		case "context_window":
			a.ContextWindow, err = runnerkit.IntArg(v, minContextWindow, maxContextWindow)
		case "max_retries":
			a.MaxRetries, err = runnerkit.IntArg(v, 0, maxRetriesCap)
		case "sessions":
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("is %v (%T); use true or false", v, v)
			}
			a.Sessions = b
		default:
			err = fmt.Errorf("is not an argument of the codex runner; known: %s", strings.Join(argumentKeys, ", "))
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("sandbox.arguments.%s %v", k, err))
		}
	}
	if len(errs) > 0 {
		return a, fmt.Errorf("%w: %s", executor.ErrInvalid, strings.Join(errs, "; "))
	}
	return a, nil
}

// Invocation implements executor.Runner. See the package documentation for
// the shape of argv, env and stdin.
func (r *Runner) Invocation(req executor.RunRequest) (executor.Invocation, error) {
	args, err := ParseArguments(req.Arguments)
	if err != nil {
		return executor.Invocation{}, err
	}
	if err := checkRequest(req); err != nil {
		return executor.Invocation{}, err
	}
	if err := checkSession(req, args); err != nil {
		return executor.Invocation{}, err
	}
	system, prompt, err := runnerkit.SplitConversation(req)
	if err != nil {
		return executor.Invocation{}, err
	}
	model := args.ModelProfile
	if model == "" {
		model = req.Model
	}
	if model == "" {
		return executor.Invocation{}, fmt.Errorf("%w: no model: the connector names none and sandbox.arguments.model_profile is unset", executor.ErrInvalid)
	}
	argv := []string{r.program, "exec",
		"--json", "--color", "never",
		// The workspace need not be a git repository.
		"--skip-git-repo-check",
		// The container is the boundary: the CLI's own sandbox (bubblewrap,
		// seccomp, landlock) cannot nest in it, and nothing may prompt.
		"--dangerously-bypass-approvals-and-sandbox",
		// Configuration comes from these flags only: $CODEX_HOME/config.toml
		// and the execpolicy .rules files are not read, and the workspace's
		// .codex/ stays an untrusted project's (its config, hooks and rules
		// off).
		"--ignore-user-config", "--ignore-rules",
		// An override the CLI does not know is an error, not a no-op: a
		// renamed setting in a later version fails the run loudly.
		"--strict-config",
		"--cd", req.Workdir,
		"-m", model,
	}
	for _, f := range DisabledFeatures {
		argv = append(argv, "--disable", f)
	}
	overrides := []override{
		{"model_provider", tomlString(ProviderID)},
		{"model_providers." + ProviderID + ".name", tomlString(ProviderID)},
		{"model_providers." + ProviderID + ".base_url", tomlString(strings.TrimSuffix(req.ModelBaseURL, "/") + "/v1")},
		{"model_providers." + ProviderID + ".env_key", tomlString(TokenEnv)},
		{"model_providers." + ProviderID + ".wire_api", tomlString("responses")},
		// The CLI retries a failed request inside each attempt of its stream
		// retry loop: two budgets of n retries make (n+1)² calls to a dead
		// upstream. One loop of n retries makes n+1.
		{"model_providers." + ProviderID + ".request_max_retries", "0"},
		{"model_providers." + ProviderID + ".stream_max_retries", strconv.Itoa(args.MaxRetries)},
		// Hosted web search runs on the upstream's side, outside the
		// sandbox's egress policy; the proxy refuses hosted tools anyway.
		{"web_search", tomlString("disabled")},
		{"analytics.enabled", "false"},
		// The CLI's bundled skills (image generation, a skill installer
		// fetching from GitHub) need OpenAI's services; an assistant's
		// skills are its own ($HOME/.agents/skills).
		{"skills.bundled.enabled", "false"},
		{"check_for_update_on_startup", "false"},
		// The agent's commands get the CLI's environment but the run's
		// token: the CLI's default excludes (*KEY*, *TOKEN*) do not apply
		// at 0.169.0 and 0.171.0, whose commands saw it
		// (TestAttackPlantedCodexConfig).
		{"shell_environment_policy.exclude", `["` + TokenEnv + `"]`},
	}
	if args.ContextWindow > 0 {
		overrides = append(overrides, override{"model_context_window", strconv.Itoa(args.ContextWindow)})
	}
	mcp, err := mcpOverrides(req.MCPConfig, req.AllowedTools)
	if err != nil {
		return executor.Invocation{}, err
	}
	overrides = append(overrides, mcp...)
	if system != "" {
		overrides = append(overrides, override{"developer_instructions", tomlString(system)})
	}
	for _, o := range overrides {
		kv := o.key + "=" + o.value
		if len(kv) > maxArg {
			return executor.Invocation{}, fmt.Errorf("%w: the %s setting is %d bytes, more than the %d one argument can carry; shorten it",
				executor.ErrInvalid, o.key, len(kv), maxArg)
		}
		argv = append(argv, "-c", kv)
	}
	argv = append(argv, sessionArgs(req)...)
	// The prompt is read from stdin ("-"): the pre-started CLI of a warm
	// turn waits there for its message.
	argv = append(argv, "-")
	return executor.Invocation{Args: argv, Env: environment(req), Stdin: []byte(prompt)}, nil
}

// override is one -c key=value; value is TOML.
type override struct{ key, value string }

// tomlString encodes s as a TOML basic string. JSON's string escapes are
// TOML's, except `\/`, which encoding/json never writes.
func tomlString(s string) string {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(sb.String(), "\n")
}

// tomlStrings encodes ss as a TOML array of basic strings.
func tomlStrings(ss []string) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = tomlString(s)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// checkRequest validates the parts of req the invocation depends on.
func checkRequest(req executor.RunRequest) error {
	var errs []string
	if req.Home == "" || !path.IsAbs(req.Home) {
		errs = append(errs, fmt.Sprintf("Home %q must be an absolute path inside the container", req.Home))
	}
	if req.Workdir == "" || !path.IsAbs(req.Workdir) {
		errs = append(errs, fmt.Sprintf("Workdir %q must be an absolute path inside the container", req.Workdir))
	}
	if req.ModelBaseURL == "" {
		errs = append(errs, "ModelBaseURL is empty; the CLI must reach the model through the sandbox's forwarder")
	} else if !strings.HasPrefix(req.ModelBaseURL, "http://") && !strings.HasPrefix(req.ModelBaseURL, "https://") {
		errs = append(errs, fmt.Sprintf("ModelBaseURL %q is not an http(s) URL", req.ModelBaseURL))
	}
	if req.APIKey == "" {
		errs = append(errs, "APIKey is empty; the CLI presents the run's token to the model proxy")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", executor.ErrInvalid, strings.Join(errs, "; "))
	}
	return nil
}

// environment is the CLI's whole environment, built from scratch.
// CODEX_HOME is left unset: the CLI then uses $HOME/.codex (CodexDir) and
// creates it, where a CODEX_HOME naming a missing directory is an error.
func environment(req executor.RunRequest) []string {
	return []string{
		"PATH=" + defaultPath,
		"HOME=" + req.Home,
		"SHELL=/bin/bash",
		"LANG=C.UTF-8",
		TokenEnv + "=" + req.APIKey,
		// The CLI's terminal niceties have no terminal here.
		"NO_COLOR=1",
		"TERM=dumb",
	}
}
