package claude_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
)

func baseRequest() executor.RunRequest {
	return executor.RunRequest{
		Messages:     []executor.Message{{Role: "user", Content: "What is 1+1?"}},
		Model:        "claude-sonnet-4-6",
		Workdir:      "/workspace",
		Home:         "/home/agent",
		ModelBaseURL: "http://127.0.0.1:7000",
		APIKey:       "tok-per-request",
	}
}

// flagValue returns the value of --name (as "--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// stdinPrompt decodes the one stream-json line of stdin.
func stdinPrompt(t *testing.T, stdin []byte) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(string(stdin), "\n"), "one JSON line")
	var line struct {
		Type    string `json:"type"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(stdin, &line))
	assert.Equal(t, "user", line.Type)
	assert.Equal(t, "user", line.Message.Role)
	return line.Message.Content
}

func TestInvocationDefaults(t *testing.T) {
	inv, err := claude.New().Invocation(baseRequest())
	require.NoError(t, err)
	args := inv.Args
	assert.Equal(t, []string{"claude", "-p", "--verbose", "--output-format", "stream-json", "--input-format", "stream-json", "--include-partial-messages"}, args[:8])
	for name, want := range map[string]string{
		"--max-turns": "50", "--permission-mode": "acceptEdits", "--model": "claude-sonnet-4-6", "--allowedTools": "Bash,Skill",
	} {
		got, ok := flagValue(args, name)
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
	}
	assert.Contains(t, args, "--strict-mcp-config", "a workspace .mcp.json written by the agent is never loaded")
	sources, _ := flagValue(args, "--setting-sources")
	assert.Equal(t, "user", sources, "project and local settings live in the workspace the agent writes: never loaded")
	addDir, _ := flagValue(args, "--add-dir")
	assert.Equal(t, "/workspace", addDir, "the workspace's CLAUDE.md loads as an added directory's")
	for _, a := range args {
		assert.NotContains(t, a, "What is 1+1?", "the prompt goes through stdin, not argv")
	}
	assert.Equal(t, "What is 1+1?", stdinPrompt(t, inv.Stdin))
	assert.Empty(t, inv.Files)

	env := envMap(inv.Env)
	assert.Equal(t, map[string]string{
		"PATH":                    "/opt/agentbox/bin:/usr/local/bin:/usr/bin:/bin",
		"HOME":                    "/home/agent",
		"CLAUDE_CONFIG_DIR":       "/home/agent/.claude",
		"SHELL":                   "/bin/bash",
		"LANG":                    "C.UTF-8",
		"ANTHROPIC_BASE_URL":      "http://127.0.0.1:7000",
		"ANTHROPIC_API_KEY":       "tok-per-request",
		"CLAUDE_CODE_MAX_RETRIES": "2",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC":     "1",
		"DISABLE_AUTOUPDATER":                          "1",
		"DISABLE_TELEMETRY":                            "1",
		"ENABLE_TOOL_SEARCH":                           "false",
		"DISABLE_ERROR_REPORTING":                      "1",
		"DISABLE_BUG_COMMAND":                          "1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE":           "1",
		"CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD": "1",
		"MCP_CONNECTION_NONBLOCKING":                   "0",
		"CLAUDE_CODE_DISABLE_CRON":                     "1",
		"BUN_JSC_numberOfGCMarkers":                    "2",
	}, env, "the environment is built from scratch")
}

// TestInvocationGCMarkers: the CLI's runtime marks with two threads when
// the sandbox's quota would have it mark with one (below two cores, the
// executors' default of one included), and sizes itself above that.
func TestInvocationGCMarkers(t *testing.T) {
	for cpus, want := range map[float64]string{0: "2", 0.5: "2", 1: "2", 1.5: "2", 2: "", 4: ""} {
		req := baseRequest()
		req.CPUs = cpus
		inv, err := claude.New().Invocation(req)
		require.NoError(t, err)
		assert.Equal(t, want, envMap(inv.Env)["BUN_JSC_numberOfGCMarkers"], "max_cpu %v", cpus)
	}
}

func TestInvocationArguments(t *testing.T) {
	req := baseRequest()
	req.Arguments = map[string]any{
		"max_turns": float64(7), "permission_mode": "bypassPermissions", "max_retries": 0,
		"allowed_tools": []any{"Read", "Bash"}, "disallowed_tools": "WebFetch, WebSearch",
	}
	req.AllowedTools = []string{"mcp__srv__tool"}
	req.MCPConfig = []byte(`{"mcpServers":{"srv":{"command":"abx","args":["mcp"]}}}`)
	req.SystemPrompt = "You are a coder."
	inv, err := claude.New(claude.WithProgram("/usr/local/bin/claude")).Invocation(req)
	require.NoError(t, err)
	assert.Equal(t, "/usr/local/bin/claude", inv.Args[0])
	for name, want := range map[string]string{
		"--max-turns": "7", "--permission-mode": "bypassPermissions",
		"--allowedTools": "Bash,Skill,Read,mcp__srv__tool", "--disallowedTools": "WebFetch,WebSearch",
		"--mcp-config": string(req.MCPConfig), "--append-system-prompt": "You are a coder.",
	} {
		got, _ := flagValue(inv.Args, name)
		assert.Equal(t, want, got, name)
	}
	env := envMap(inv.Env)
	assert.Equal(t, "1", env["IS_SANDBOX"], "bypass mode needs IS_SANDBOX when the CLI runs as root")
	assert.Equal(t, "0", env["CLAUDE_CODE_MAX_RETRIES"])
}

func TestInvocationDisallowedWins(t *testing.T) {
	req := baseRequest()
	req.Arguments = map[string]any{"disallowed_tools": []string{"Bash", "Skill"}}
	inv, err := claude.New().Invocation(req)
	require.NoError(t, err)
	_, ok := flagValue(inv.Args, "--allowedTools")
	assert.False(t, ok, "a disallowed default is not allowed as well")
	got, _ := flagValue(inv.Args, "--disallowedTools")
	assert.Equal(t, "Bash,Skill", got)
}

func TestInvocationHistory(t *testing.T) {
	req := baseRequest()
	req.SystemPrompt = "Be brief."
	req.Messages = []executor.Message{
		{Role: "system", Content: "Speak English."},
		{Role: "user", Content: "My name is Bob."},
		{Role: "assistant", Content: "Nice to meet you, Bob."},
		{Role: "user", Content: "What is my name?"},
	}
	inv, err := claude.New().Invocation(req)
	require.NoError(t, err)
	sys, _ := flagValue(inv.Args, "--append-system-prompt")
	assert.Equal(t, "Be brief.\n\nSpeak English.", sys)
	prompt := stdinPrompt(t, inv.Stdin)
	assert.True(t, strings.HasPrefix(prompt, "<conversation_history>\n"), prompt)
	assert.Contains(t, prompt, "<user>\nMy name is Bob.\n</user>\n<assistant>\nNice to meet you, Bob.\n</assistant>\n</conversation_history>")
	assert.True(t, strings.HasSuffix(prompt, "</conversation_history>\n\nWhat is my name?"), prompt)
}

func TestInvocationLongInputs(t *testing.T) {
	req := baseRequest()
	big := strings.Repeat("p", 300<<10)
	req.Messages = []executor.Message{{Role: "user", Content: big}}
	req.SystemPrompt = strings.Repeat("s", 200<<10)
	inv, err := claude.New().Invocation(req)
	require.NoError(t, err)
	for _, a := range inv.Args {
		assert.Less(t, len(a), 128<<10, "no argv element reaches the kernel's 128 KiB cap")
	}
	assert.Equal(t, big, stdinPrompt(t, inv.Stdin))
	file, ok := flagValue(inv.Args, "--append-system-prompt-file")
	require.True(t, ok)
	assert.Equal(t, "/workspace/"+claude.SystemPromptFile, file)
	assert.Equal(t, req.SystemPrompt, string(inv.Files[claude.SystemPromptFile]))
}

func TestInvocationErrors(t *testing.T) {
	tests := map[string]struct {
		change func(*executor.RunRequest)
		want   string
	}{
		"no messages": {func(r *executor.RunRequest) { r.Messages = nil }, "conversation is empty"},
		"ends with assistant": {func(r *executor.RunRequest) {
			r.Messages = append(r.Messages, executor.Message{Role: "assistant", Content: "x"})
		}, "must end with the user's message"},
		"empty prompt": {func(r *executor.RunRequest) { r.Messages[0].Content = " " }, "user's message is empty"},
		"bad role": {func(r *executor.RunRequest) {
			r.Messages = append([]executor.Message{{Role: "tool", Content: "x"}}, r.Messages...)
		}, `role "tool"`},
		"relative home":        {func(r *executor.RunRequest) { r.Home = "home" }, "Home"},
		"no model url":         {func(r *executor.RunRequest) { r.ModelBaseURL = "" }, "ModelBaseURL"},
		"unknown argument":     {func(r *executor.RunRequest) { r.Arguments = map[string]any{"max_turn": 3} }, "sandbox.arguments.max_turn is not an argument"},
		"max_turns not whole":  {func(r *executor.RunRequest) { r.Arguments = map[string]any{"max_turns": 2.5} }, "whole number from 1 to 1000"},
		"max_turns zero":       {func(r *executor.RunRequest) { r.Arguments = map[string]any{"max_turns": 0} }, "whole number from 1 to 1000"},
		"max_retries too high": {func(r *executor.RunRequest) { r.Arguments = map[string]any{"max_retries": 10} }, "from 0 to 5"},
		"bad permission mode":  {func(r *executor.RunRequest) { r.Arguments = map[string]any{"permission_mode": "yolo"} }, "use one of acceptEdits"},
		"tool with comma":      {func(r *executor.RunRequest) { r.AllowedTools = []string{"a,b"} }, "not a tool name"},
		"tools not strings":    {func(r *executor.RunRequest) { r.Arguments = map[string]any{"allowed_tools": []any{1}} }, "as strings"},
		"mcp not json":         {func(r *executor.RunRequest) { r.MCPConfig = []byte("{") }, "not valid JSON"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			tc.change(&req)
			_, err := claude.New().Invocation(req)
			require.Error(t, err)
			assert.ErrorIs(t, err, executor.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
