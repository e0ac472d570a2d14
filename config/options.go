package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of the sandbox options, applied by applyDefaults and listed in
// REFERENCE.md. The container limits are executor's defaults (one source
// for the config and every backend); the rest are the config's own.
const (
	DefaultMemoryBytes  = executor.DefaultMemoryBytes
	DefaultCPUs         = executor.DefaultCPUs
	DefaultPidsLimit    = executor.DefaultPidsLimit
	DefaultTimeout      = executor.DefaultTimeout
	DefaultNetwork      = executor.DefaultNetwork
	DefaultUser         = executor.DefaultUser
	DefaultLeaseWait    = executor.DefaultLeaseWait
	DefaultDiskBytes    = executor.DefaultDiskBytes
	DefaultInodes       = executor.DefaultInodes
	DefaultPolicy       = PolicyRequest
	DefaultIdleTTL      = 10 * time.Minute
	DefaultHookTimeout  = 5 * time.Second
	DefaultStallTimeout = 5 * time.Minute
)

// Executors a gateway can run its sandboxes with: a gateway-level choice
// (one per gateway process), not an assistant's.
const (
	// ExecutorDocker runs each sandbox as a Docker container (the default).
	ExecutorDocker = "docker"
	// ExecutorLocal runs each sandbox as a bubblewrap process tree on the
	// host (executor/local), for hosts without a container runtime.
	ExecutorLocal = "local"
	// ExecutorKubernetes runs each sandbox as a pod (executor/kubernetes),
	// for gateways that scale out on a cluster.
	ExecutorKubernetes = "kubernetes"
)

// ParseExecutor checks a gateway's executor setting ("" means
// ExecutorDocker) and returns the executor's name.
func ParseExecutor(s string) (string, error) {
	switch s {
	case "", ExecutorDocker:
		return ExecutorDocker, nil
	case ExecutorLocal:
		return ExecutorLocal, nil
	case ExecutorKubernetes:
		return ExecutorKubernetes, nil
	}
	return "", fmt.Errorf("executor %q is not known; use %q (containers), %q (bubblewrap, no container runtime) or %q (pods): %w", s, ExecutorDocker, ExecutorLocal, ExecutorKubernetes, ErrInvalid)
}

// Bounds of sandbox.budget. A budget is never unlimited; an unset key takes
// the gateway's default, derived from the assistant.
const (
	maxBudgetCalls  = 100_000
	minBudgetTokens = 1_000
	maxBudgetTokens = 10_000_000_000
)

// budgetKeys are the keys of sandbox.budget.
var budgetKeys = []string{"calls", "tokens", "wall"}

// Sandbox policies.
const (
	// PolicyRequest gives every request a fresh container over the chat's
	// persistent workspace.
	PolicyRequest = "request"
	// PolicySession keeps the chat's container between requests until it
	// has been idle for IdleTTL, with the next turn's CLI started in it
	// (middleware: Sandbox.Spec.IdleTTL; see middleware/warm.go).
	PolicySession = "session"
)

// Commands (agent CLIs) a sandbox can run.
const (
	CommandClaude = "claude"
	CommandCodex  = "codex"
	CommandCursor = "cursor"
)

// Bounds of the sandbox options. Limits are never unlimited: 0 and -1 are
// refused. The quota's and the CPU's are executor's table; a package file
// is held tighter than a library's Spec on memory, pids and timeout.
const (
	minMemoryBytes  int64 = 128 << 20
	minCPUs               = executor.MinCPUs
	minPids         int64 = 32
	maxPids         int64 = 65536
	minTimeout            = 10 * time.Second
	maxTimeout            = 24 * time.Hour
	minIdleTTL            = 10 * time.Second
	minHookTimeout        = 100 * time.Millisecond
	maxHookTimeout        = 5 * time.Minute
	minStallTimeout       = 10 * time.Second
	maxLeaseWait          = 10 * time.Minute
	minDiskBytes          = executor.MinDiskBytes
	minInodes             = executor.MinInodes
	maxInodes             = executor.MaxInodes
)

// argType is the type of a command argument.
type argType string

const (
	argInt     argType = "integer"
	argString  argType = "string"
	argBool    argType = "boolean"
	argStrings argType = "array of strings"
	argEnum    argType = "string, one of"
)

// argument is one entry of a command's argument schema.
type argument struct {
	Name string
	Type argType
	Enum []string
	// Min and Max bound an integer argument.
	Min, Max int64
	Doc      string
}

// command is one agent CLI and the rules its assistants follow.
type command struct {
	Name         string
	DefaultImage string
	Doc          string
	// NeedsNetwork is why the command cannot run with network "none"
	// ("" when it can).
	NeedsNetwork string
	// NeedsKey is why the command needs a connector with a key.
	NeedsKey string
	// ConnectorTypes are the connector types the CLI can use.
	ConnectorTypes []string
	Arguments      []argument
	// Refused are argument names with a hint saying where the setting
	// belongs instead.
	Refused map[string]string
}

// commands is the one table of agent CLIs and their argument schemas.
var commands = []command{
	{
		Name:           CommandClaude,
		DefaultImage:   "agentbox/sandbox-claude:latest",
		Doc:            "Claude Code (`claude -p`); the model is reached through the gateway's model proxy, so network \"none\" works.",
		ConnectorTypes: []string{ConnectorAnthropic, ConnectorOpenAI},
		Arguments: []argument{
			{Name: "max_turns", Type: argInt, Min: 1, Max: 1000, Doc: "stop the agent after this many turns (`--max-turns`); the run then finishes with reason length (runner default 50)"},
			{Name: "max_retries", Type: argInt, Min: 0, Max: 5, Doc: "the CLI's own retries of a failed model call (`CLAUDE_CODE_MAX_RETRIES`, runner default 2)"},
			{Name: "permission_mode", Type: argEnum, Enum: []string{"default", "acceptEdits", "bypassPermissions", "dontAsk", "plan"}, Doc: "`--permission-mode` (runner default acceptEdits); headless runs need acceptEdits or bypassPermissions to write files"},
			{Name: "allowed_tools", Type: argStrings, Doc: "tools allowed without asking (`--allowedTools`), e.g. [\"Bash(git:*)\", \"Read\"]; MCP tools from mcp.servers are added"},
			{Name: "disallowed_tools", Type: argStrings, Doc: "tools the agent may not use (`--disallowedTools`)"},
			{Name: "sessions", Type: argBool, Doc: "keep the CLI's own session (its transcript, tool calls and results included) between the chat's turns and resume it when the client's history continues it (`--resume`); false sends earlier turns as text every time (runner default true; the gateway keeps sessions under {data}/sessions, removed with the chat's workspace)"},
		},
		Refused: map[string]string{
			"append_system_prompt": "put the instructions in prompts.yml (role: system); the runner passes them to the CLI",
			"system_prompt":        "put the instructions in prompts.yml (role: system); the runner passes them to the CLI",
			"model":                "the model is the connector's; point the assistant at another connector",
		},
	},
	{
		Name:         CommandCodex,
		DefaultImage: "agentbox/sandbox-codex:latest",
		Doc: "OpenAI's Codex CLI (`codex exec --json`); it speaks the Responses API, which the gateway's model proxy serves: passed through to an openai connector with `\"api\": \"responses\"`, translated to Chat Completions for another openai connector and to the Messages API for an anthropic one, so network \"none\" works. " +
			"Its hooks, plugins, apps, goals, subagents, memories and hosted web search are off; MCP servers and skills work as for claude.",
		ConnectorTypes: []string{ConnectorAnthropic, ConnectorOpenAI},
		Arguments: []argument{
			{Name: "model_profile", Type: argString, Doc: "the model the CLI is told it runs (`-m`), whose tools (apply_patch), instructions and context window it takes from its catalog; the model proxy still pins the connector's model. Default the connector's model; set a model the CLI knows, e.g. \"gpt-5.5\", for a connector model it does not (an Anthropic or local model), which otherwise gets a shell-only fallback"},
			{Name: "context_window", Type: argInt, Min: 4096, Max: 10_000_000, Doc: "the context window in tokens the CLI plans for (`model_context_window`), when the connector's model has a smaller one than the profile's"},
			{Name: "max_retries", Type: argInt, Min: 0, Max: 5, Doc: "the CLI's retries of a failed model call or broken stream (`stream_max_retries`, runner default 2)"},
			{Name: "sessions", Type: argBool, Doc: "keep the CLI's own session (its turns, tool calls and results included) between the chat's turns and resume it (`codex exec resume`) when the client's history continues it; false sends earlier turns as text every time (runner default true)"},
		},
		Refused: map[string]string{
			"append_system_prompt": "put the instructions in prompts.yml (role: system); the runner passes them as the CLI's developer instructions",
			"system_prompt":        "put the instructions in prompts.yml (role: system); the runner passes them as the CLI's developer instructions",
			"model":                "the model is the connector's; set model_profile for the tools and instructions the CLI uses",
			"max_turns":            "the Codex CLI has no turn limit; bound a run with sandbox.budget (calls, tokens, wall)",
			"permission_mode":      "the Codex CLI runs without approvals in the sandbox: the container is the boundary",
			"allowed_tools":        "the Codex CLI's own tools are always on; MCP tools are allowed through mcp.servers",
			"disallowed_tools":     "the Codex CLI cannot turn its own tools off one by one; MCP tools are allowed through mcp.servers",
		},
	},
	{
		Name:           CommandCursor,
		DefaultImage:   "agentbox/sandbox-cursor:latest",
		Doc:            "Cursor's CLI (`cursor-agent -p`); it talks to Cursor's servers directly with the connector's key.",
		NeedsNetwork:   "cursor-agent cannot use a local model endpoint: it talks to Cursor's servers directly, so the sandbox needs egress",
		NeedsKey:       "cursor-agent authenticates to Cursor with the connector's key (CURSOR_API_KEY)",
		ConnectorTypes: []string{ConnectorCursor},
		Arguments: []argument{
			{Name: "model", Type: argString, Doc: "model name passed as `--model`, overriding the connector's model"},
			{Name: "force", Type: argBool, Doc: "pass `--force`: let the agent write files and run commands without asking (the runner's default applies when absent)"},
		},
		Refused: map[string]string{
			"append_system_prompt": "put the instructions in prompts.yml (role: system); the runner writes them where cursor-agent reads rules",
			"system_prompt":        "put the instructions in prompts.yml (role: system); the runner writes them where cursor-agent reads rules",
		},
	},
}

func commandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.Name
	}
	return names
}

func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].Name == name {
			return &commands[i]
		}
	}
	return nil
}

func (c *command) argument(name string) *argument {
	for i := range c.Arguments {
		if c.Arguments[i].Name == name {
			return &c.Arguments[i]
		}
	}
	return nil
}

// sandboxDecoder decodes one sandbox block.
type sandboxDecoder struct {
	*decoder
	opts  *LoadOptions
	sb    *Sandbox
	cmd   *command
	nodes map[string]*node // the options present, by key
}

// option is one key of the sandbox block: its documentation and decoder.
type option struct {
	Key     string
	Type    string
	Default string
	Doc     string
	decode  func(s *sandboxDecoder, n *node, path string)
}

// sandboxOptions is the one table of sandbox options: decoding and
// REFERENCE.md both come from it.
var sandboxOptions = []option{
	// command has no decode func: decodeSandbox reads it first, since the
	// arguments depend on it.
	{Key: "command", Type: "string", Default: "(required)", Doc: "agent CLI: " + quoteList(commandNames())},
	{Key: "image", Type: "string", Default: "per command (see Commands)", Doc: "Docker image with the agent CLI; it is never pulled by agentbox",
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.str(n, path, `"agentbox/sandbox-claude:latest"`); ok {
				if v == "" || strings.ContainsAny(v, " \t\n") || strings.Contains(v, "://") {
					s.errorf(n, path, `use an image reference such as "agentbox/sandbox-claude:latest"`, "%q is not an image reference", v)
					return
				}
				s.sb.Image = v
			}
		}},
	{Key: executor.KeyMemory, Type: "size", Default: formatSize(DefaultMemoryBytes), Doc: "memory limit (swap is not allowed); a number with k, m or g, at least " + formatSize(minMemoryBytes),
		decode: func(s *sandboxDecoder, n *node, path string) {
			v, ok := s.str(n, path, `"4g"`)
			if !ok {
				return
			}
			b, err := parseSize(v)
			if err != nil {
				s.errorf(n, path, `use a number with k, m or g, e.g. "4g"`, "%q is not a size", v)
				return
			}
			if b < minMemoryBytes {
				s.errorf(n, path, fmt.Sprintf("use at least %q; a limit is never unlimited", formatSize(minMemoryBytes)), "%q is below the minimum", v)
				return
			}
			if host := s.opts.hostMemory(); host > 0 && b > host {
				s.warnf(n, path, "lower it; the container can never use more than the host has", "%q is more than the host's %s of memory", v, formatSize(host))
			}
			s.sb.MemoryBytes = b
		}},
	{Key: executor.KeyDisk, Type: "size", Default: formatSize(DefaultDiskBytes), Doc: "disk quota of the chat's workspace: no file in the sandbox grows past it, and the gateway's quota mode (-quota, docker.Options.Quota in agentbox.Options.Backend) bounds the total: by default a watchdog stops a run over it; in loop mode (Docker) the workspace is a filesystem image where writes fail with \"no space left on device\"; the local executor caps each file only. A number with k, m or g, at least " + formatSize(minDiskBytes) + ". A workspace shared by assistants keeps the largest quota asked for",
		decode: func(s *sandboxDecoder, n *node, path string) {
			if b, ok := s.size(n, path, minDiskBytes, "a quota is never unlimited"); ok {
				s.sb.DiskBytes = b
			}
		}},
	{Key: executor.KeyInodes, Type: "integer", Default: strconv.FormatInt(DefaultInodes, 10) + " (one per 8 KiB of a smaller max_disk)", Doc: fmt.Sprintf("how many files and directories the chat's workspace may hold, %d to one per KiB of max_disk (0 and -1, \"unlimited\", are refused); the local executor bounds no file count, nor the kubernetes one with its quota watchdog off, and they refuse a value other than the default at start-up", minInodes),
		decode: func(s *sandboxDecoder, n *node, path string) {
			v, ok := s.integer(n, path, "200000")
			if !ok {
				return
			}
			if v < minInodes || v > maxInodes {
				s.errorf(n, path, fmt.Sprintf("a quota is never unlimited; use a number from %d up, e.g. 200000", minInodes), "%d is out of range", v)
				return
			}
			s.sb.Inodes = v
		}},
	{Key: executor.KeyCPUs, Type: "number", Default: strconv.FormatFloat(DefaultCPUs, 'g', -1, 64), Doc: "CPU quota in cores (1.5 = one and a half), from 0.01 to the host's core count",
		decode: func(s *sandboxDecoder, n *node, path string) {
			v, ok := s.number(n, path, "2")
			if !ok {
				return
			}
			if v < minCPUs {
				s.errorf(n, path, "use a positive number of cores, e.g. 1 or 0.5", "%s is not a CPU quota", n.str)
				return
			}
			if host := s.opts.hostCPUs(); host > 0 && v > float64(host) {
				s.errorf(n, path, fmt.Sprintf("use at most %d", host), "%s is more than the host's %d cores", n.str, host)
				return
			}
			s.sb.CPUs = v
		}},
	{Key: executor.KeyPids, Type: "integer", Default: strconv.FormatInt(DefaultPidsLimit, 10), Doc: fmt.Sprintf("process limit in the container, %d to %d (0 and -1, \"unlimited\", are refused); a pod's is its node's kubelet podPidsLimit, so the kubernetes executor refuses a value other than the default at start-up", minPids, maxPids),
		decode: func(s *sandboxDecoder, n *node, path string) {
			v, ok := s.integer(n, path, "256")
			if !ok {
				return
			}
			switch {
			case v <= 0:
				s.errorf(n, path, fmt.Sprintf("a limit is never unlimited; use a number from %d to %d, e.g. 256", minPids, maxPids), "%d is not a process limit", v)
			case v < minPids || v > maxPids:
				s.errorf(n, path, fmt.Sprintf("use a number from %d to %d, e.g. 256", minPids, maxPids), "%d is out of range", v)
			default:
				s.sb.PidsLimit = v
			}
		}},
	{Key: executor.KeyTimeout, Type: "duration", Default: DefaultTimeout.String(), Doc: "the sandbox's whole life per request, " + minTimeout.String() + " to " + maxTimeout.String(),
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.duration(n, path, minTimeout, maxTimeout, `"10m"`); ok {
				s.sb.Timeout = v
			}
		}},
	{Key: executor.KeyNetwork, Type: "string", Default: strconv.Quote(DefaultNetwork), Doc: "Docker network: \"none\", \"bridge\" or the name of a network you created; \"host\" and \"container:...\" are refused. The local and kubernetes executors give sandboxes loopback only and refuse another at start-up",
		decode: func(s *sandboxDecoder, n *node, path string) {
			v, ok := s.str(n, path, `"none"`)
			if !ok {
				return
			}
			switch {
			case v == "host" || strings.HasPrefix(v, "container:"):
				s.errorf(n, path, `use "none", "bridge" or a network you created for sandboxes`, "%q would share another network stack with the sandbox", v)
			case !networkRE.MatchString(v):
				s.errorf(n, path, `use "none", "bridge" or a Docker network name`, "%q is not a network name", v)
			default:
				s.sb.Network = v
			}
		}},
	{Key: executor.KeyRuntime, Type: "string", Default: `"" (the daemon's default)`, Doc: `OCI runtime: "" (daemon default), "runc" or "runsc" (gVisor); the docker executor refuses at start-up one its daemon does not have, the local and kubernetes executors any (kubernetes takes its RuntimeClass from the gateway's options)`,
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.oneOf(n, path, []string{"", "runc", "runsc"}); ok {
				s.sb.Runtime = v
			}
		}},
	{Key: executor.KeyUser, Type: "string", Default: strconv.Quote(DefaultUser), Doc: "numeric \"uid:gid\" the agent runs as; uid 0 (root) is refused",
		decode: func(s *sandboxDecoder, n *node, path string) {
			v, ok := s.str(n, path, `"1000:1000"`)
			if !ok {
				return
			}
			m := userRE.FindStringSubmatch(v)
			if m == nil {
				s.errorf(n, path, `use a numeric "uid:gid", e.g. "1000:1000"`, "%q is not a uid:gid", v)
				return
			}
			if uid, _ := strconv.ParseUint(m[1], 10, 32); uid == 0 {
				s.errorf(n, path, `use a non-root uid such as "1000:1000" (the image must let that user write /workspace)`, "%q runs the agent as root", v)
				return
			}
			s.sb.User = v
		}},
	{Key: executor.KeyPolicy, Type: "string", Default: strconv.Quote(DefaultPolicy), Doc: `"request": a fresh container per request over the persistent workspace, removed after the response; "session": after a good turn the chat's container is kept, idle (processes the agent left are killed, HOME is rebuilt), and the next turn's CLI is started resuming the chat's session and warmed up (a model call answered by the gateway itself, never the upstream), so the next request of the same chat and assistant with unchanged options only sends its message; a changed option, another assistant or a container near the end of its life (2h, or timeout + idle_ttl) gets a new container. Kept containers count toward the gateway's memory bound, not its run slots, and are removed at shutdown. The local executor cannot keep a sandbox and refuses "session" at start-up`,
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.oneOf(n, path, []string{PolicyRequest, PolicySession}); ok {
				s.sb.Policy = v
			}
		}},
	{Key: "idle_ttl", Type: "duration", Default: DefaultIdleTTL.String() + " (session policy only)", Doc: "how long a kept session container may stay idle before it is removed (the workspace and the agent's session stay; the next turn starts cold and resumes the session), " + minIdleTTL.String() + " to " + maxTimeout.String(),
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.duration(n, path, minIdleTTL, maxTimeout, `"10m"`); ok {
				s.sb.IdleTTL = v
			}
		}},
	{Key: "hook_timeout", Type: "duration", Default: DefaultHookTimeout.String(), Doc: "time budget of each JS hook call (Create, Next), " + minHookTimeout.String() + " to " + maxHookTimeout.String(),
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.duration(n, path, minHookTimeout, maxHookTimeout, `"5s"`); ok {
				s.sb.HookTimeout = v
			}
		}},
	{Key: "stall_timeout", Type: "duration", Default: DefaultStallTimeout.String(), Doc: "the run is stopped when the agent CLI prints nothing for this long (mind long tool calls), at least " + minStallTimeout.String(),
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.duration(n, path, minStallTimeout, maxTimeout, `"5m"`); ok {
				s.sb.StallTimeout = v
			}
		}},
	{Key: executor.KeyLeaseWait, Type: "duration", Default: DefaultLeaseWait.String(), Doc: "how long a request waits for another request of the same chat before failing as busy, 0 to " + maxLeaseWait.String(),
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.duration(n, path, 0, maxLeaseWait, `"30s"`); ok {
				s.sb.LeaseWait = v
				s.sb.leaseWaitSet = true
			}
		}},
	{Key: "environment_prompt", Type: "bool", Default: "true", Doc: "append a summary of the sandbox's environment to the agent's system prompt: OS, kernel, the versions of the usual tools in the image (the CLI, node, python, git, ...), the network and the limits, captured once per image content and options by running a short script in a sandbox of the image (a rebuilt image is captured again); false leaves it out. GET /v1/models/{id} shows the snapshot either way",
		decode: func(s *sandboxDecoder, n *node, path string) {
			if v, ok := s.boolean(n, path); ok {
				s.sb.OmitEnvironmentPrompt = !v
			}
		}},
	{Key: executor.KeyEgress, Type: "array", Default: "[] (nothing)", Doc: egressDoc + "; the local executor has no egress relay and refuses it at start-up, as the docker one does without the helper",
		decode: func(s *sandboxDecoder, n *node, path string) { s.egress(n, path) }},
	{Key: "arguments", Type: "object", Default: "{}", Doc: "command-specific arguments, see Commands",
		decode: func(s *sandboxDecoder, n *node, path string) { s.arguments(n, path) }},
	{Key: "checkpoints", Type: "bool or object", Default: fmt.Sprintf("true: max %d, max_bytes %s", executor.DefaultCheckpoints, formatSize(executor.DefaultCheckpointBytes)),
		Doc: fmt.Sprintf("checkpoints of the chat's workspace, one at the chat's start and one at the end of every turn, kept where no sandbox reaches; "+
			"when a request's history returns to an earlier point (a regenerated answer, an edited turn) the workspace is put back to that point's checkpoint before the run; "+
			"false turns them off; `{\"max\": 20, \"max_bytes\": \"1g\"}` bounds them per workspace (max 1 to %d, max_bytes at least %s), the oldest going first. "+
			"The docker (but not in loop quota mode), local and kubernetes (with a storage class) backends keep them", maxCheckpoints, formatSize(minCheckpointBytes)),
		decode: func(s *sandboxDecoder, n *node, path string) { s.checkpoints(n, path) }},
	{Key: "budget", Type: "object", Default: "calls 4*max_turns+10 (210), tokens 2000000, wall = timeout",
		Doc: fmt.Sprintf("per-request model budget the gateway's model proxy enforces: `{\"calls\": 50, \"tokens\": 1000000, \"wall\": \"5m\"}`; "+
			"calls 1 to %d model calls, tokens %d to %d (input + output + cache), wall a duration up to timeout; an unset key keeps its default; "+
			"a call over budget is refused with an error naming the budget", maxBudgetCalls, minBudgetTokens, int64(maxBudgetTokens)),
		decode: func(s *sandboxDecoder, n *node, path string) { s.budget(n, path) }},
}

// Bounds of sandbox.checkpoints.
const (
	maxCheckpoints           = 1000
	minCheckpointBytes int64 = 16 << 20
)

// checkpoints decodes sandbox.checkpoints: a boolean, or an object of
// bounds.
func (s *sandboxDecoder) checkpoints(n *node, path string) {
	if n.kind == kindBool {
		if v, ok := s.boolean(n, path); ok {
			s.sb.Checkpoints.Off = !v
		}
		return
	}
	if !s.object(n, path, []string{"max", "max_bytes"}) {
		return
	}
	for _, m := range n.members {
		p := joinPath(path, m.key)
		switch m.key {
		case "max":
			v, ok := s.integer(m.val, p, "20")
			if !ok {
				continue
			}
			if v < 1 || v > maxCheckpoints {
				s.errorf(m.val, p, fmt.Sprintf("use a whole number from 1 to %d, e.g. 20", maxCheckpoints), "%d is out of range", v)
				continue
			}
			s.sb.Checkpoints.Max = int(v)
		case "max_bytes":
			if v, ok := s.size(m.val, p, minCheckpointBytes, "a bound is never unlimited"); ok {
				s.sb.Checkpoints.MaxBytes = v
			}
		}
	}
}

// size decodes a size of at least min ("2g"); never says, below min,
// that it is never unlimited.
func (s *sandboxDecoder) size(n *node, path string, min int64, never string) (int64, bool) {
	v, ok := s.str(n, path, `"2g"`)
	if !ok {
		return 0, false
	}
	b, err := parseSize(v)
	if err != nil {
		s.errorf(n, path, `use a number with k, m or g, e.g. "2g"`, "%q is not a size", v)
		return 0, false
	}
	if b < min {
		s.errorf(n, path, fmt.Sprintf("use at least %q; %s", formatSize(min), never), "%q is below the minimum", v)
		return 0, false
	}
	return b, true
}

// budget decodes sandbox.budget.
func (s *sandboxDecoder) budget(n *node, path string) {
	if !s.object(n, path, budgetKeys) {
		return
	}
	for _, m := range n.members {
		p := joinPath(path, m.key)
		switch m.key {
		case "calls":
			v, ok := s.integer(m.val, p, "50")
			if !ok {
				continue
			}
			if v < 1 || v > maxBudgetCalls {
				s.errorf(m.val, p, fmt.Sprintf("use a whole number from 1 to %d (a budget is never unlimited), e.g. 50", maxBudgetCalls), "%d is out of range", v)
				continue
			}
			s.sb.Budget.Calls = int(v)
		case "tokens":
			v, ok := s.integer(m.val, p, "1000000")
			if !ok {
				continue
			}
			if v < minBudgetTokens || v > maxBudgetTokens {
				s.errorf(m.val, p, fmt.Sprintf("use a whole number from %d to %d (a budget is never unlimited), e.g. 1000000", minBudgetTokens, int64(maxBudgetTokens)), "%d is out of range", v)
				continue
			}
			s.sb.Budget.Tokens = v
		case "wall":
			if v, ok := s.duration(m.val, p, minTimeout, maxTimeout, `"5m"`); ok {
				s.sb.Budget.Wall = v
			}
		}
	}
}

var (
	networkRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	userRE    = regexp.MustCompile(`^(\d{1,10}):(\d{1,10})$`)
	sizeRE    = regexp.MustCompile(`^(\d+(?:\.\d+)?)([kmgt])?(?:i?b)?$`)
)

func optionKeys() []string {
	keys := make([]string, len(sandboxOptions))
	for i, o := range sandboxOptions {
		keys[i] = o.Key
	}
	return keys
}

// decodeSandbox decodes a sandbox block and applies the defaults.
func decodeSandbox(d *decoder, n *node, opts *LoadOptions) *Sandbox {
	const path = "sandbox"
	if !d.object(n, path, optionKeys()) {
		return nil
	}
	s := &sandboxDecoder{decoder: d, opts: opts, sb: &Sandbox{}, nodes: map[string]*node{}}
	for _, m := range n.members {
		s.nodes[m.key] = m.val
	}
	cn := s.nodes["command"]
	if cn == nil {
		d.errorf(n, joinPath(path, "command"), "add \"command\": "+quoteList(commandNames()), "missing")
	} else if v, ok := d.oneOf(cn, joinPath(path, "command"), commandNames()); ok {
		s.sb.Command = v
		s.cmd = lookupCommand(v)
	}
	for _, o := range sandboxOptions {
		if v := s.nodes[o.Key]; v != nil && o.decode != nil {
			o.decode(s, v, joinPath(path, o.Key))
		}
	}
	// A network value already reported as bad is not reported again as
	// "none" by the command's rules.
	badNetwork := s.nodes[executor.KeyNetwork] != nil && s.sb.Network == ""
	applyDefaults(s.sb)
	s.crossChecks(n, path, badNetwork)
	return s.sb
}

// applyDefaults is the one place where defaults are applied.
func applyDefaults(sb *Sandbox) {
	if sb.Image == "" {
		if c := lookupCommand(sb.Command); c != nil {
			sb.Image = c.DefaultImage
		}
	}
	if sb.MemoryBytes == 0 {
		sb.MemoryBytes = DefaultMemoryBytes
	}
	if sb.CPUs == 0 {
		sb.CPUs = DefaultCPUs
	}
	if sb.DiskBytes == 0 {
		sb.DiskBytes = DefaultDiskBytes
	}
	if sb.Inodes == 0 {
		sb.Inodes = executor.DefaultInodesFor(sb.DiskBytes)
	}
	if sb.PidsLimit == 0 {
		sb.PidsLimit = DefaultPidsLimit
	}
	if sb.Timeout == 0 {
		sb.Timeout = DefaultTimeout
	}
	if sb.Network == "" {
		sb.Network = DefaultNetwork
	}
	if sb.User == "" {
		sb.User = DefaultUser
	}
	if sb.Policy == "" {
		sb.Policy = DefaultPolicy
	}
	if sb.IdleTTL == 0 && sb.Policy == PolicySession {
		sb.IdleTTL = DefaultIdleTTL
	}
	if sb.HookTimeout == 0 {
		sb.HookTimeout = DefaultHookTimeout
	}
	if sb.StallTimeout == 0 {
		sb.StallTimeout = DefaultStallTimeout
	}
	if sb.LeaseWait == 0 && !sb.leaseWaitSet {
		sb.LeaseWait = DefaultLeaseWait
	}
	if sb.Arguments == nil {
		sb.Arguments = map[string]any{}
	}
}

// crossChecks validates options against each other and the command.
func (s *sandboxDecoder) crossChecks(block *node, path string, badNetwork bool) {
	sb := s.sb
	at := func(key string) *node {
		if n := s.nodes[key]; n != nil {
			return n
		}
		return block
	}
	if n := s.nodes["idle_ttl"]; n != nil && sb.Policy != PolicySession {
		s.warnf(n, joinPath(path, "idle_ttl"), `remove it or set "policy": "session"`, "has no effect with policy %q", sb.Policy)
	}
	if sb.HookTimeout > sb.Timeout {
		s.errorf(at("hook_timeout"), joinPath(path, "hook_timeout"), "make it shorter than timeout", "%s is longer than the sandbox timeout %s", sb.HookTimeout, sb.Timeout)
	}
	if sb.Budget.Wall > sb.Timeout {
		s.errorf(at("budget"), joinPath(path, "budget.wall"), "make it at most timeout, or leave it out to use timeout", "%s is longer than the sandbox timeout %s, which ends the request first", sb.Budget.Wall, sb.Timeout)
	}
	if sb.StallTimeout >= sb.Timeout && s.nodes["stall_timeout"] != nil {
		s.warnf(at("stall_timeout"), joinPath(path, "stall_timeout"), "make it shorter than timeout", "%s is not shorter than the sandbox timeout %s: the watchdog never fires", sb.StallTimeout, sb.Timeout)
	}
	if sb.Inodes > sb.DiskBytes/1024 && sb.DiskBytes > 0 {
		s.errorf(at(executor.KeyInodes), joinPath(path, executor.KeyInodes), fmt.Sprintf("use at most %d or raise max_disk", sb.DiskBytes/1024), "%d files do not fit in max_disk %s (a file takes at least 1 KiB)", sb.Inodes, formatSize(sb.DiskBytes))
	}
	if len(sb.Egress) > 0 && sb.Network != "none" && !badNetwork {
		s.errorf(at(executor.KeyEgress), joinPath(path, executor.KeyEgress), `remove "network" (or set it to "none") so that the allowlist is the sandbox's only way out`,
			"has no effect with network %q: the container reaches every host directly", sb.Network)
	}
	if s.cmd != nil && s.cmd.NeedsNetwork != "" && sb.Network == "none" && len(sb.Egress) == 0 && !badNetwork {
		where, key := at(executor.KeyNetwork), executor.KeyNetwork
		if s.nodes[executor.KeyNetwork] == nil {
			where = at("command")
		}
		s.errorf(where, joinPath(path, key), `list the vendor's hosts in "egress" (the CLI must honour HTTPS_PROXY), or declare "network": "bridge" (or a network you created that reaches only the vendor)`,
			"a %s sandbox cannot run with network %q: %s", s.cmd.Name, sb.Network, s.cmd.NeedsNetwork)
	}
}

// duration reads a duration string within [lo, hi].
func (s *sandboxDecoder) duration(n *node, path string, lo, hi time.Duration, example string) (time.Duration, bool) {
	v, ok := s.str(n, path, example)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		s.errorf(n, path, "use a number with a unit (ms, s, m, h), e.g. "+example, "%q is not a duration", v)
		return 0, false
	}
	if d < lo || d > hi || (lo == 0 && d < 0) {
		s.errorf(n, path, fmt.Sprintf("use a duration from %s to %s, e.g. %s", lo, hi, example), "%q is out of range", v)
		return 0, false
	}
	return d, true
}

// arguments decodes the command-specific arguments.
func (s *sandboxDecoder) arguments(n *node, path string) {
	if n.kind != kindObject {
		s.wrongType(n, path, "an object", `{"max_turns": 20}`)
		return
	}
	if s.cmd == nil {
		return // the command is already reported
	}
	args := map[string]any{}
	for _, m := range n.members {
		p := joinPath(path, m.key)
		a := s.cmd.argument(m.key)
		if a == nil {
			s.unknownArgument(m.key, m.val, p)
			continue
		}
		if v, ok := s.argumentValue(a, m.val, p); ok {
			args[m.key] = v
		}
	}
	s.sb.Arguments = args
}

func (s *sandboxDecoder) unknownArgument(name string, n *node, path string) {
	if hint, ok := s.cmd.Refused[name]; ok {
		s.errorf(n, path, hint, "not an argument of %s", s.cmd.Name)
		return
	}
	for _, other := range commands {
		if other.Name != s.cmd.Name && other.argument(name) != nil {
			s.errorf(n, path, "remove it; "+s.cmd.Name+" has no equivalent", "%s is a %s-only argument", name, other.Name)
			return
		}
	}
	known := make([]string, len(s.cmd.Arguments))
	for i, a := range s.cmd.Arguments {
		known[i] = a.Name
	}
	hint := suggest(name, known)
	if hint == "" {
		hint = "remove it; " + s.cmd.Name + " takes " + strings.Join(known, ", ")
	}
	s.errorf(n, path, hint, "unknown argument of %s", s.cmd.Name)
}

func (s *sandboxDecoder) argumentValue(a *argument, n *node, path string) (any, bool) {
	switch a.Type {
	case argInt:
		v, ok := s.integer(n, path, strconv.FormatInt(max(a.Min, min(a.Max, 20)), 10))
		if ok && (v < a.Min || v > a.Max) {
			s.errorf(n, path, fmt.Sprintf("use a whole number from %d to %d", a.Min, a.Max), "%d is out of range", v)
			return nil, false
		}
		return int(v), ok
	case argString:
		return s.str(n, path, `"name"`)
	case argBool:
		return s.boolean(n, path)
	case argStrings:
		return s.strings(n, path, `["Read", "Bash(git:*)"]`)
	case argEnum:
		return s.oneOf(n, path, a.Enum)
	}
	return nil, false
}

// parseSize parses "4g", "512m", "1024k", "1.5g" or a byte count
// (binary multiples; case-insensitive; an optional trailing b or ib).
func parseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	shift := map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m[2]]
	v := f * float64(uint64(1)<<shift)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// formatSize renders bytes with the largest exact unit ("2g", "512m").
func formatSize(b int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"t", 40}, {"g", 30}, {"m", 20}, {"k", 10}} {
		if b >= 1<<u.shift && b%(1<<u.shift) == 0 {
			return strconv.FormatInt(b>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}
