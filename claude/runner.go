package claude

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/runnerkit"
)

// SettingSources is the CLI's --setting-sources: the user's settings only
// (CLAUDE_CONFIG_DIR, outside the workspace), never "project" or "local",
// which the agent can write.
const SettingSources = "user"

// DefaultProgram is the CLI's executable, searched on the sandbox's PATH.
const DefaultProgram = "claude"

// SystemPromptFile is where a system prompt too long for one argv element
// is written (relative to the workspace) and passed with
// --append-system-prompt-file.
const SystemPromptFile = ".agentbox/system-prompt.md"

// Limits on the invocation.
const (
	// maxArg is the longest argv element we build. Linux caps one element
	// at 128 KiB (MAX_ARG_STRLEN); stay clear of it.
	maxArg = 96 << 10
	// DefaultMaxTurns bounds an agent run whose assistant sets no
	// max_turns.
	DefaultMaxTurns = 50
	// DefaultMaxRetries bounds the CLI's own retries of a failed model
	// call: with its default of 10 a dead upstream takes about three
	// minutes to fail (transcripts d1b, d2b).
	DefaultMaxRetries = 2
	// maxRetriesCap is the most retries an assistant may ask for.
	maxRetriesCap = 5
	// DefaultPermissionMode lets the agent edit files in its workspace
	// without asking; shell commands need allowed_tools (Bash is allowed
	// by default).
	DefaultPermissionMode = "acceptEdits"
)

// defaultPath is PATH for the CLI: the image's tools live in these, after
// /opt/agentbox/bin, where executor/docker mounts a host-provided helper
// (agentbox-helper for .mcp.json's relay, abx for the agent's tools).
const defaultPath = "/opt/agentbox/bin:/usr/local/bin:/usr/bin:/bin"

// DefaultAllowedTools are allowed in every run besides the assistant's and
// the request's own: the shell (the container is the boundary) and Skill,
// which skills copied into .claude/skills/ need.
var DefaultAllowedTools = []string{"Bash", "Skill"}

// permissionModes are the values --permission-mode accepts.
var permissionModes = []string{"acceptEdits", "bypassPermissions", "default", "dontAsk", "plan"}

// Runner builds Claude Code invocations and parses their output. The zero
// value is not ready; use New.
type Runner struct {
	program string
	maxLine int
	results int // Parse returns after this many results; 0: at the end
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

// WithResults sets how many result lines end Parse (default 1: Invocation
// writes one prompt, and the CLI writes nothing after its result but
// exits, unless the agent left work in the background, in which case
// Parse reads to the end whatever n is). 0 reads the output to its end,
// adding up every result, for a caller that wrote several prompts on
// stdin; a negative n is 0.
func WithResults(n int) Option { return func(r *Runner) { r.results = max(n, 0) } }

// New returns a Runner.
func New(opts ...Option) *Runner {
	r := &Runner{program: DefaultProgram, results: 1, logger: hclog.NewNullLogger()}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Name implements executor.Runner: the sandbox command "claude".
func (r *Runner) Name() string { return "claude" }

// Arguments are the assistant's sandbox arguments the claude runner
// understands, decoded from RunRequest.Arguments.
type Arguments struct {
	// MaxTurns is --max-turns (default DefaultMaxTurns).
	MaxTurns int
	// PermissionMode is --permission-mode (default DefaultPermissionMode).
	PermissionMode string
	// AllowedTools and DisallowedTools extend --allowedTools and set
	// --disallowedTools.
	AllowedTools    []string
	DisallowedTools []string
	// MaxRetries is CLAUDE_CODE_MAX_RETRIES (default DefaultMaxRetries,
	// at most 5).
	MaxRetries int
	// Sessions keeps the CLI's session transcript between turns when the
	// gateway does (default true; "sessions: false" turns it off and every
	// turn gets the history as text).
	Sessions bool
}

// argumentKeys lists the keys ParseArguments accepts.
var argumentKeys = []string{"allowed_tools", "disallowed_tools", "max_retries", "max_turns", "permission_mode", "sessions"}

// ParseArguments decodes and validates the assistant's sandbox arguments.
// Unknown keys and bad values are errors wrapping executor.ErrInvalid that
// name the key and what it accepts.
func ParseArguments(args map[string]any) (Arguments, error) {
	a := Arguments{MaxTurns: DefaultMaxTurns, PermissionMode: DefaultPermissionMode, MaxRetries: DefaultMaxRetries, Sessions: true}
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
		case "max_turns":
			a.MaxTurns, err = runnerkit.IntArg(v, 1, 1000)
		case "max_retries":
			a.MaxRetries, err = runnerkit.IntArg(v, 0, maxRetriesCap)
		case "permission_mode":
			s, ok := v.(string)
			if !ok || !slices.Contains(permissionModes, s) {
				err = fmt.Errorf("is %v; use one of %s", v, strings.Join(permissionModes, ", "))
			}
			a.PermissionMode = s
		case "allowed_tools":
			a.AllowedTools, err = toolsArg(v)
		case "disallowed_tools":
			a.DisallowedTools, err = toolsArg(v)
		case "sessions":
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("is %v (%T); use true or false", v, v)
			}
			a.Sessions = b
		default:
			err = fmt.Errorf("is not an argument of the claude runner; known: %s", strings.Join(argumentKeys, ", "))
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

// toolsArg accepts a list of tool names or one comma-separated string.
func toolsArg(v any) ([]string, error) {
	var raw []string
	switch x := v.(type) {
	case string:
		raw = strings.Split(x, ",")
	case []string:
		raw = x
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("holds %v (%T); list tool names as strings", e, e)
			}
			raw = append(raw, s)
		}
	default:
		return nil, fmt.Errorf("is %v (%T); use a list of tool names", v, v)
	}
	var out []string
	for _, s := range raw {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.ContainsAny(s, ",\n\x00") {
			return nil, fmt.Errorf("holds %q; a tool name has no commas or newlines", s)
		}
		out = append(out, s)
	}
	return out, nil
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
	stdin, err := stdinMessage(prompt)
	if err != nil {
		return executor.Invocation{}, err
	}
	inv := executor.Invocation{Stdin: stdin}
	argv := []string{r.program,
		"-p", "--verbose",
		"--output-format", "stream-json",
		"--input-format", "stream-json",
		"--include-partial-messages",
	}
	argv = append(argv, sessionArgs(req)...)
	argv = append(argv,
		"--max-turns", strconv.Itoa(args.MaxTurns),
		"--permission-mode", args.PermissionMode,
		"--strict-mcp-config",
		// Only the user's settings load: CLAUDE_CONFIG_DIR is in the
		// per-run HOME, written by the gateway. Project and local settings
		// live in the workspace, which the agent writes: their hooks, env
		// and apiKeyHelper would run on the next turn.
		"--setting-sources="+SettingSources,
		// The workspace's CLAUDE.md is the user's project file; with the
		// project source off it loads only as an added directory's
		// (CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD), which reads
		// CLAUDE.md and nothing else of the directory.
		"--add-dir="+req.Workdir,
	)
	if req.Model != "" {
		argv = append(argv, "--model", req.Model)
	}
	allowed := slices.DeleteFunc(mergeTools(DefaultAllowedTools, args.AllowedTools, req.AllowedTools),
		func(t string) bool { return slices.Contains(args.DisallowedTools, t) })
	if len(allowed) > 0 {
		argv = append(argv, "--allowedTools="+strings.Join(allowed, ","))
	}
	if len(args.DisallowedTools) > 0 {
		argv = append(argv, "--disallowedTools="+strings.Join(args.DisallowedTools, ","))
	}
	if req.MCPConfig != nil {
		if !json.Valid(req.MCPConfig) {
			return executor.Invocation{}, fmt.Errorf("%w: the MCP configuration is not valid JSON; check the assistant's mcp servers", executor.ErrInvalid)
		}
		if len(req.MCPConfig) > maxArg {
			return executor.Invocation{}, fmt.Errorf("%w: the MCP configuration is %d bytes, more than the %d one argument can carry; list fewer servers",
				executor.ErrInvalid, len(req.MCPConfig), maxArg)
		}
		argv = append(argv, "--mcp-config="+string(req.MCPConfig))
	}
	switch {
	case system == "":
	case len(system) <= maxArg:
		argv = append(argv, "--append-system-prompt="+system)
	default:
		inv.Files = map[string][]byte{SystemPromptFile: []byte(system)}
		argv = append(argv, "--append-system-prompt-file="+path.Join(req.Workdir, SystemPromptFile))
	}
	inv.Args = argv
	inv.Env = environment(req, args)
	return inv, nil
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
	}
	for _, t := range req.AllowedTools {
		if t == "" || strings.ContainsAny(t, ",\n\x00") {
			errs = append(errs, fmt.Sprintf("allowed tool %q is not a tool name", t))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", executor.ErrInvalid, strings.Join(errs, "; "))
	}
	return nil
}

// mergeTools concatenates tool lists without duplicates, in order.
func mergeTools(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, t := range l {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// environment is the CLI's whole environment, built from scratch.
func environment(req executor.RunRequest, args Arguments) []string {
	env := []string{
		"PATH=" + defaultPath,
		"HOME=" + req.Home,
		"CLAUDE_CONFIG_DIR=" + path.Join(req.Home, ".claude"),
		"SHELL=/bin/bash",
		"LANG=C.UTF-8",
		"ANTHROPIC_BASE_URL=" + req.ModelBaseURL,
		"ANTHROPIC_API_KEY=" + req.APIKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CODE_MAX_RETRIES=" + strconv.Itoa(args.MaxRetries),
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1",
		"CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD=1",
		// The CLI may start its first model call before its MCP servers
		// are connected; on a loaded machine the gateway's tools were then
		// missing from the tool list. "0" makes it wait for them.
		"MCP_CONNECTION_NONBLOCKING=0",
		// From 2.1.3xx the CLI defers MCP tools behind its ToolSearch
		// tool: the model's tool list lacks them until it searches, which
		// costs a model call and a model that knows to search, and sends
		// tool_reference blocks that non-Anthropic upstreams behind the
		// model proxy do not know. The gateway grants a short, explicit
		// list of MCP tools; offer them directly. Older CLIs ignore it.
		"ENABLE_TOOL_SEARCH=false",
		// The CLI's job scheduler (CronCreate, CronList, CronDelete): a
		// job is a prompt no user sent, fired while the CLI lives and
		// idles, and durable jobs are kept in the workspace, where a
		// later turn's CLI (which resumes the session) fires them.
		"CLAUDE_CODE_DISABLE_CRON=1",
	}
	if cmp.Or(req.CPUs, executor.DefaultCPUs) < 2 {
		// The CLI's runtime (Bun's JavaScriptCore) sizes its parallel
		// garbage collector from the CFS quota it reads in its cgroup:
		// under a quota below two cores it marks on one thread, and a
		// collection on the way to the first model request made each
		// message wait about 70 ms longer than with two markers (a warm
		// turn's first request: 190 ms against 115 ms in the sandbox,
		// 100 ms on the host). Two markers share the same quota.
		env = append(env, "BUN_JSC_numberOfGCMarkers=2")
	}
	if args.PermissionMode == "bypassPermissions" {
		// The CLI refuses bypass mode as root unless told it runs in a
		// sandbox, which it does; the variable changes nothing else.
		env = append(env, "IS_SANDBOX=1")
	}
	return env
}
