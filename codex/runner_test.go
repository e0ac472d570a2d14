package codex_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
)

func baseRequest() executor.RunRequest {
	return executor.RunRequest{
		Messages: []executor.Message{{Role: "user", Content: "hello"}},
		Model:    "gpt-5.5", Workdir: "/workspace", Home: "/home/agent",
		ModelBaseURL: "http://127.0.0.1:7000", APIKey: "tok-1",
	}
}

// overrides returns the -c settings of argv by key, values decoded (the
// runner writes TOML strings in JSON's escapes).
func overrides(t *testing.T, argv []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i, a := range argv {
		if a != "-c" {
			continue
		}
		require.Less(t, i+1, len(argv))
		k, v, ok := strings.Cut(argv[i+1], "=")
		require.True(t, ok, argv[i+1])
		out[k] = v
	}
	return out
}

func str(t *testing.T, toml string) string {
	t.Helper()
	var s string
	require.NoError(t, json.Unmarshal([]byte(toml), &s), toml)
	return s
}

func TestInvocation(t *testing.T) {
	inv, err := codex.New().Invocation(baseRequest())
	require.NoError(t, err)
	a := inv.Args
	assert.Equal(t, []string{"codex", "exec", "--json"}, a[:3])
	for _, f := range []string{"--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--ignore-user-config", "--ignore-rules", "--strict-config"} {
		assert.Contains(t, a, f)
	}
	assert.Equal(t, []string{"--ephemeral", "-"}, a[len(a)-2:], "no session kept; the prompt comes on stdin")
	i := slices.Index(a, "-m")
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "gpt-5.5", a[i+1])
	for _, f := range codex.DisabledFeatures {
		assert.True(t, slices.ContainsFunc(a, func(s string) bool { return s == f }), "feature %s is disabled", f)
	}
	o := overrides(t, a)
	assert.Equal(t, "agentbox", str(t, o["model_provider"]))
	assert.Equal(t, "http://127.0.0.1:7000/v1", str(t, o["model_providers.agentbox.base_url"]))
	assert.Equal(t, "responses", str(t, o["model_providers.agentbox.wire_api"]))
	assert.Equal(t, codex.TokenEnv, str(t, o["model_providers.agentbox.env_key"]))
	assert.Equal(t, "0", o["model_providers.agentbox.request_max_retries"])
	assert.Equal(t, "2", o["model_providers.agentbox.stream_max_retries"])
	assert.Equal(t, "disabled", str(t, o["web_search"]))
	assert.NotContains(t, o, "developer_instructions", "no system prompt, no developer instructions")
	assert.Equal(t, "hello", string(inv.Stdin))
	assert.Equal(t, []string{"PATH=/opt/agentbox/bin:/usr/local/bin:/usr/bin:/bin", "HOME=/home/agent",
		"SHELL=/bin/bash", "LANG=C.UTF-8", "AGENTBOX_MODEL_TOKEN=tok-1", "NO_COLOR=1", "TERM=dumb"}, inv.Env)
	for _, arg := range a {
		assert.NotContains(t, arg, "tok-1", "the token travels in the environment only")
	}
}

func TestInvocationPromptAndInstructions(t *testing.T) {
	req := baseRequest()
	req.SystemPrompt = "Be \"terse\".\nUse tabs\tand \\ backslashes, ünïcode ✓ and <html>."
	req.Messages = []executor.Message{{Role: "system", Content: "Extra rule."}, {Role: "user", Content: "first"},
		{Role: "assistant", Content: "answer"}, {Role: "user", Content: "second"}}
	inv, err := codex.New().Invocation(req)
	require.NoError(t, err)
	o := overrides(t, inv.Args)
	assert.Equal(t, req.SystemPrompt+"\n\nExtra rule.", str(t, o["developer_instructions"]))
	assert.NotContains(t, o["developer_instructions"], `\/`, "TOML has no \\/ escape")
	assert.Equal(t, "<conversation_history>\nThe conversation so far, oldest first. Earlier answers may mention files that are still in the workspace. Answer the message after the history.\n<user>\nfirst\n</user>\n<assistant>\nanswer\n</assistant>\n</conversation_history>\n\nsecond", string(inv.Stdin))

	req.SessionID, req.Resume = "3f2b9c1e-8a4d-4e2f-9b7a-1c2d3e4f5a6b", true
	inv, err = codex.New().Invocation(req)
	require.NoError(t, err)
	assert.Equal(t, "second", string(inv.Stdin), "a resumed session holds the history")
	assert.Equal(t, []string{"resume", req.SessionID, "-"}, inv.Args[len(inv.Args)-3:])

	req.SystemPrompt = strings.Repeat("x", 100<<10)
	_, err = codex.New().Invocation(req)
	assert.ErrorIs(t, err, executor.ErrInvalid)
	assert.ErrorContains(t, err, "developer_instructions")
}

func TestInvocationArguments(t *testing.T) {
	req := baseRequest()
	req.Arguments = map[string]any{"model_profile": "gpt-5.5", "context_window": float64(128000), "max_retries": float64(0), "sessions": false}
	req.Model = "claude-sonnet-4-5"
	inv, err := codex.New().Invocation(req)
	require.NoError(t, err)
	assert.Equal(t, "gpt-5.5", inv.Args[slices.Index(inv.Args, "-m")+1], "the profile is what the CLI is told")
	o := overrides(t, inv.Args)
	assert.Equal(t, "128000", o["model_context_window"])
	assert.Equal(t, "0", o["model_providers.agentbox.stream_max_retries"])

	bad := map[string]map[string]any{
		"unknown key":      {"max_turns": 5},
		"profile type":     {"model_profile": 5},
		"profile shape":    {"model_profile": "gpt 5; rm"},
		"retries too many": {"max_retries": 9},
		"window too small": {"context_window": 10},
		"sessions type":    {"sessions": "yes"},
	}
	for name, args := range bad {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			req.Arguments = args
			_, err := codex.New().Invocation(req)
			assert.ErrorIs(t, err, executor.ErrInvalid)
			assert.ErrorContains(t, err, "sandbox.arguments.")
		})
	}
}

func TestInvocationRequestErrors(t *testing.T) {
	tests := map[string]func(*executor.RunRequest){
		"relative home":  func(r *executor.RunRequest) { r.Home = "home" },
		"no model relay": func(r *executor.RunRequest) { r.ModelBaseURL = "" },
		"relay not http": func(r *executor.RunRequest) { r.ModelBaseURL = "unix:///x" },
		"no token":       func(r *executor.RunRequest) { r.APIKey = "" },
		"no model":       func(r *executor.RunRequest) { r.Model = "" },
		"ends with an answer": func(r *executor.RunRequest) {
			r.Messages = append(r.Messages, executor.Message{Role: "assistant", Content: "x"})
		},
		"unknown role": func(r *executor.RunRequest) {
			r.Messages = append([]executor.Message{{Role: "tool", Content: "x"}}, r.Messages...)
		},
		"new session":         func(r *executor.RunRequest) { r.SessionID = "3f2b9c1e-8a4d-4e2f-9b7a-1c2d3e4f5a6b" },
		"resume without id":   func(r *executor.RunRequest) { r.Resume = true },
		"session id not uuid": func(r *executor.RunRequest) { r.SessionID, r.Resume = "../x", true },
		"fork": func(r *executor.RunRequest) {
			r.SessionID, r.ForkFrom, r.ResumeAt = "3f2b9c1e-8a4d-4e2f-9b7a-1c2d3e4f5a6b", "a", "b"
		},
		"sessions off with id": func(r *executor.RunRequest) {
			r.Arguments = map[string]any{"sessions": false}
			r.SessionID, r.Resume = "3f2b9c1e-8a4d-4e2f-9b7a-1c2d3e4f5a6b", true
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			mutate(&req)
			_, err := codex.New().Invocation(req)
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	}
}

func TestInvocationMCP(t *testing.T) {
	req := baseRequest()
	req.MCPConfig = []byte(`{"mcpServers":{
		"gateway":{"command":"agentbox-helper","args":["mcp","--server","gateway"]},
		"docs":{"type":"http","url":"https://mcp.example/x","headers":{"Authorization":"Bearer s"}},
		"local":{"command":"node","args":["srv.js"],"env":{"MODE":"a\"b"}}}}`)
	req.AllowedTools = []string{"mcp__gateway__whoami", "mcp__gateway__whoami", "mcp__docs", "Bash"}
	inv, err := codex.New().Invocation(req)
	require.NoError(t, err)
	o := overrides(t, inv.Args)
	assert.Equal(t, "agentbox-helper", str(t, o["mcp_servers.gateway.command"]))
	assert.Equal(t, `["mcp","--server","gateway"]`, o["mcp_servers.gateway.args"])
	assert.Equal(t, `["whoami"]`, o["mcp_servers.gateway.enabled_tools"], "the allowlist holds in the CLI too")
	assert.Equal(t, "https://mcp.example/x", str(t, o["mcp_servers.docs.url"]))
	assert.Equal(t, "Bearer s", str(t, o["mcp_servers.docs.http_headers.Authorization"]))
	assert.NotContains(t, o, "mcp_servers.docs.enabled_tools", "mcp__docs allows every tool of the server")
	assert.Equal(t, `a"b`, str(t, o["mcp_servers.local.env.MODE"]))
	assert.Equal(t, `[]`, o["mcp_servers.local.enabled_tools"], "a server the allowlist does not name gets no tool")

	for name, cfg := range map[string]string{
		"not json":         `{`,
		"bad server name":  `{"mcpServers":{"a.b":{"command":"x"}}}`,
		"neither":          `{"mcpServers":{"a":{}}}`,
		"bad env name":     `{"mcpServers":{"a":{"command":"x","env":{"A=B":"c"}}}}`,
		"http and command": `{"mcpServers":{"a":{"type":"http","command":"x","url":"http://x"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			req.MCPConfig = []byte(cfg)
			_, err := codex.New().Invocation(req)
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	}
}
