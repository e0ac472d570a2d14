package cursor

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// DefaultProgram is the CLI's executable name, searched on the sandbox's
// PATH.
const DefaultProgram = "cursor-agent"

// Workspace files the runner writes (relative to the workspace).
const (
	// RulesFile holds the assistant's instructions as an always-applied
	// Cursor project rule.
	RulesFile = ".cursor/rules/agentbox.mdc"
	// MCPFile is Cursor's project MCP configuration.
	MCPFile = ".cursor/mcp.json"
)

// defaultPath is PATH for the CLI: the image's tools live in these, after
// /opt/agentbox/bin, where executor/docker mounts a host-provided helper.
const defaultPath = "/opt/agentbox/bin:/usr/local/bin:/usr/bin:/bin"

// Sandbox arguments a cursor assistant may set (the config package's
// schema for the cursor command declares the same two).
const (
	// argModel (string) overrides the connector's model (--model).
	argModel = "model"
	// argForce (bool, default true) passes --force: without it the CLI asks
	// before writing files or running commands, which fails in print mode.
	argForce = "force"
)

// Runner builds cursor-agent invocations and parses their output. The zero
// value is not ready; use New.
type Runner struct {
	program string
	partial bool
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

// WithoutPartialOutput drops --stream-partial-output: text then arrives one
// whole assistant message at a time instead of as token deltas.
func WithoutPartialOutput() Option { return func(r *Runner) { r.partial = false } }

// WithMaxLine caps one line of the CLI's output in bytes (default
// jsonl.DefaultMaxLine); longer lines are skipped with a warning.
func WithMaxLine(n int) Option { return func(r *Runner) { r.maxLine = n } }

// New returns a Runner.
func New(opts ...Option) *Runner {
	r := &Runner{program: DefaultProgram, partial: true, logger: hclog.NewNullLogger()}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Name is the sandbox command this runner serves.
func (r *Runner) Name() string { return "cursor" }

// ErrNoAPIKey is returned (wrapping executor.ErrInvalid) by Invocation when
// the request carries no Cursor API key.
var ErrNoAPIKey = errors.New("cursor: no API key")

// Invocation builds argv, env, stdin and workspace files for one headless
// run. See the package documentation for their shape.
func (r *Runner) Invocation(req executor.RunRequest) (executor.Invocation, error) {
	if strings.TrimSpace(req.APIKey) == "" {
		return executor.Invocation{}, fmt.Errorf("%w: %w: set the cursor connector's key (a Cursor user API key); cursor-agent talks to Cursor directly and cannot use the model proxy's token", executor.ErrInvalid, ErrNoAPIKey)
	}
	if strings.ContainsAny(req.APIKey, "\x00\r\n") {
		return executor.Invocation{}, fmt.Errorf("%w: cursor API key contains a control character; paste the key without line breaks", executor.ErrInvalid)
	}
	workdir := req.Workdir
	if workdir == "" {
		workdir = executor.ContainerWorkdir
	}
	if req.Home == "" {
		return executor.Invocation{}, fmt.Errorf("%w: cursor run needs RunRequest.Home (a writable per-run HOME for the CLI's config and session files)", executor.ErrInvalid)
	}
	model, force, err := checkArguments(req.Model, req.Arguments)
	if err != nil {
		return executor.Invocation{}, err
	}
	system, prompt, err := composePrompt(req.Messages)
	if err != nil {
		return executor.Invocation{}, err
	}
	mcp, err := mcpFile(req.MCPConfig)
	if err != nil {
		return executor.Invocation{}, err
	}

	argv := []string{r.program, "-p", "--output-format", "stream-json"}
	if r.partial {
		argv = append(argv, "--stream-partial-output")
	}
	if force {
		argv = append(argv, "--force")
	}
	argv = append(argv, "--trust", "--workspace", workdir)
	if model != "" {
		argv = append(argv, "--model", model)
	}
	if req.MCPConfig != nil {
		argv = append(argv, "--approve-mcps")
	}

	instructions := joinNonEmpty("\n\n", req.SystemPrompt, system)
	return executor.Invocation{
		Args: argv,
		Env: []string{
			"HOME=" + req.Home,
			"PATH=" + defaultPath,
			"NO_COLOR=1",
			"CURSOR_API_KEY=" + req.APIKey,
		},
		Stdin: []byte(prompt),
		Files: map[string][]byte{
			RulesFile: rulesFile(instructions),
			MCPFile:   mcp,
		},
	}, nil
}

// checkArguments validates the assistant's sandbox arguments and returns
// the model and whether to pass --force.
func checkArguments(model string, in map[string]any) (string, bool, error) {
	force := true
	for _, k := range sortedKeys(in) {
		switch v := in[k]; k {
		case argModel:
			s, ok := v.(string)
			if !ok || strings.TrimSpace(s) == "" {
				return "", false, fmt.Errorf("%w: sandbox argument %q is %v; use a model name such as \"sonnet-4.5\"", executor.ErrInvalid, k, v)
			}
			model = s
		case argForce:
			b, ok := v.(bool)
			if !ok {
				return "", false, fmt.Errorf("%w: sandbox argument %q is %v; use true or false", executor.ErrInvalid, k, v)
			}
			force = b
		default:
			return "", false, fmt.Errorf("%w: sandbox argument %q is not supported by the cursor runner; supported: %s, %s", executor.ErrInvalid, k, argForce, argModel)
		}
	}
	return model, force, nil
}

// rulesFile renders the instructions as an always-applied Cursor rule.
func rulesFile(instructions string) []byte {
	var b strings.Builder
	b.WriteString("---\ndescription: Instructions of the agentbox assistant (written by agentbox on every run)\nalwaysApply: true\n---\n")
	if instructions != "" {
		b.WriteString("\n")
		b.WriteString(instructions)
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// emptyMCP is the MCP file written when no servers are configured.
var emptyMCP = []byte("{\"mcpServers\":{}}\n")

// mcpFile validates the MCP configuration (an object with an mcpServers
// object, as for Claude's .mcp.json) and returns the file content.
func mcpFile(cfg []byte) ([]byte, error) {
	if cfg == nil {
		return emptyMCP, nil
	}
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(cfg, &doc); err != nil {
		return nil, fmt.Errorf("%w: MCP configuration is not valid JSON (%w); it must be an object like {\"mcpServers\":{\"name\":{\"command\":...}}}", executor.ErrInvalid, err)
	}
	if doc.MCPServers == nil {
		return nil, fmt.Errorf("%w: MCP configuration has no \"mcpServers\" object; Cursor reads servers only from that key", executor.ErrInvalid)
	}
	return cfg, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinNonEmpty(sep string, parts ...string) string {
	var kept []string
	for _, p := range parts {
		if strings.TrimSpace(p) != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, sep)
}
