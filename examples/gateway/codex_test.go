package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// startCodexGateway runs the example gateway offline over dir, needing
// the codex image too; the log goes to t and to the returned buffer.
func startCodexGateway(t *testing.T, dir string) (*Gateway, *testenv.SyncBuffer) {
	t.Helper()
	testenv.RequireImage(t)
	require.Equal(t, "agentbox/sandbox-codex:latest", testenv.RequireCodexImage(t), "examples/assistants/codex names this image")
	var log testenv.SyncBuffer
	g, _ := startGateway(t, func(o *Options) {
		o.Dir = dir
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Debug, Output: &log})
	})
	return g, &log
}

// TestCodexGatewayTool: the codex assistant's agent calls the gateway's
// whoami tool through the helper's MCP relay. Its profile's model has the
// CLI's tool search, which defers MCP tools: the first call offers only
// tool_search, the model searches, and the next call offers the gateway's
// server as a namespace holding the allowlisted tool alone, in the
// search's output.
func TestCodexGatewayTool(t *testing.T) {
	g, _ := startCodexGateway(t, "..")
	c := newClient(g.URL, "carol", "codex-tool-chat")
	resp, err := c.Chat.Completions.New(context.Background(), sdk.ChatCompletionNewParams{
		Model: demoCodex, Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("Who am I?")},
	})
	require.NoError(t, err)
	got := resp.Choices[0].Message.Content
	t.Logf("answer: %s", got)
	assert.Contains(t, got, "user: carol")
	assert.Contains(t, got, "chat: codex-tool-chat")
	assert.Contains(t, got, "assistant: codex")
	reqs := g.CodexModel.ResponseRequests()
	require.Len(t, reqs, 3, "search, call, answer")
	assert.True(t, reqs[0].Offers("tool_search"))
	assert.False(t, reqs[0].Offers("mcp__gateway"), "deferred behind the tool search")
	// The search's output carries the tools it found, for the next call.
	var found []scriptedresponses.Tool
	for _, it := range reqs[1].Body.Input {
		if it.Type == "tool_search_output" {
			require.NoError(t, json.Unmarshal(it.Tools, &found))
		}
	}
	require.Len(t, found, 1, "found by the search: the gateway's server")
	assert.Equal(t, "mcp__gateway", found[0].Name)
	require.Len(t, found[0].Tools, 1, "the allowlist holds in the CLI: whoami alone")
	assert.Equal(t, "whoami", found[0].Tools[0].Name)
}

// sessionDir is a gateway directory with the example's codex assistant
// under the session policy.
func sessionDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "connectors"), os.DirFS("../connectors")))
	require.NoError(t, os.CopyFS(filepath.Join(dir, "assistants", "codex"), os.DirFS("../assistants/codex")))
	pkg := filepath.Join(dir, "assistants", "codex", "package.yao")
	b, err := os.ReadFile(pkg)
	require.NoError(t, err)
	s := strings.Replace(string(b), `"timeout": "5m",`, `"timeout": "5m", "policy": "session",`, 1)
	require.NotEqual(t, string(b), s)
	require.NoError(t, os.WriteFile(pkg, []byte(s), 0o644))
	return dir
}

// TestCodexSessionTurns runs three turns of one chat with the codex
// assistant under the session policy: the second continues the Codex
// CLI's own session, resumed by a CLI started ahead in the kept
// container, so the model sees the first turn's command and its output as
// the CLI recorded them; the third sends an edited history, which starts
// a new session with that history replayed as real turns.
func TestCodexSessionTurns(t *testing.T) {
	g, log := startCodexGateway(t, sessionDir(t))
	ctx := context.Background()
	c := newClient(g.URL, "dave", "codex-session")
	ask := func(msgs ...sdk.ChatCompletionMessageParamUnion) string {
		t.Helper()
		resp, err := c.Chat.Completions.New(ctx, sdk.ChatCompletionNewParams{Model: demoCodex, Messages: msgs})
		require.NoError(t, err)
		return resp.Choices[0].Message.Content
	}
	first := ask(sdk.UserMessage("$ echo marker-$((6*7))"))
	require.Contains(t, first, "marker-42")
	second := ask(sdk.UserMessage("$ echo marker-$((6*7))"), sdk.AssistantMessage(first), sdk.UserMessage("$ echo again"))
	require.Contains(t, second, "again")
	reqs := g.CodexModel.ResponseRequests()
	require.Len(t, reqs, 4)
	var earlier []string
	for _, it := range reqs[2].Body.Input {
		if it.Type == "function_call_output" {
			earlier = append(earlier, it.Output.Text())
		}
	}
	require.Len(t, earlier, 1, "the resumed session holds the first turn's command")
	assert.Contains(t, earlier[0], "marker-42", "and its output")
	assert.Equal(t, "$ echo again", reqs[2].UserPrompt(), "the new message alone")
	assert.Contains(t, log.String(), "the pre-started CLI takes the turn's message", "a CLI started ahead in the kept container took the turn")

	third := ask(sdk.UserMessage("$ echo edited"), sdk.AssistantMessage("an answer the client changed"), sdk.UserMessage("$ echo third"))
	require.Contains(t, third, "third")
	reqs = g.CodexModel.ResponseRequests()
	var history []string
	for _, m := range reqs[4].Messages("") {
		if t := m.Content.Text(); m.Role != "developer" && !strings.HasPrefix(t, "<") {
			history = append(history, m.Role+":"+t)
		}
	}
	assert.Equal(t, []string{"user:$ echo edited", "assistant:an answer the client changed", "user:$ echo third"}, history,
		"an edited history starts a new session with it replayed as real turns")
}

// plantCodexHome is the attacker's command in turn 1: the Codex CLI's
// start-up files planted in HOME's .codex (its CODEX_HOME) and the
// workspace's, and a skill in HOME.
const plantCodexHome = "$ " + scriptedresponses.PlantCodexConfig + `mkdir -p "$HOME/.agents/skills/planted"
printf -- '---\nname: planted\ndescription: PLANTED-SKILL\n---\nplanted\n' > "$HOME/.agents/skills/planted/SKILL.md"
plant "$HOME/.codex" home; plant /workspace/.codex project; echo planted-done`

// TestCodexAttackPlantedHome: under the session policy the chat's
// container outlives the turn and the next turn's CLI is started in it
// ahead of the request. Configuration the agent writes in turn 1 into
// HOME's .codex (config.toml with a provider, instructions, notify, an
// MCP server and an inherit-all shell policy; rules; hooks; AGENTS.md and
// AGENTS.override.md; prompts), a skill in HOME, and the same in the
// workspace's .codex, has no effect on turn 2: no planted command runs,
// the model calls reach the gateway's upstream with the connector's key
// and carry none of the planted text or tools, a planted rule forbids
// nothing and the agent's command gets no token.
func TestCodexAttackPlantedHome(t *testing.T) {
	testenv.RequireCodexImage(t)
	g, data := startGateway(t, func(o *Options) { o.Dir = sessionDir(t) })
	ctx := context.Background()
	const chat = "codex-planted"
	c := newClient(g.URL, "erin", chat)
	ask := func(msgs ...sdk.ChatCompletionMessageParamUnion) string {
		t.Helper()
		resp, err := c.Chat.Completions.New(ctx, sdk.ChatCompletionNewParams{Model: demoCodex, Messages: msgs})
		require.NoError(t, err)
		return resp.Choices[0].Message.Content
	}
	first := ask(sdk.UserMessage(plantCodexHome))
	require.Contains(t, first, "planted-done", "the plant ran")
	ws, err := executor.WorkspaceDir(data, "erin", chat)
	require.NoError(t, err)
	// What fired during turn 1 is not the point.
	old, err := filepath.Glob(filepath.Join(ws, ".marker-*"))
	require.NoError(t, err)
	for _, m := range old {
		require.NoError(t, os.Remove(m))
	}
	n := len(g.CodexModel.ResponseRequests())

	second := ask(sdk.UserMessage(plantCodexHome), sdk.AssistantMessage(first),
		sdk.UserMessage("$ echo turn2-ran; env | grep -c -e AGENTBOX_MODEL_TOKEN -e tok- || true"))
	assert.Contains(t, second, "turn2-ran\n0", "a planted rule forbade nothing, and the command's environment holds no token")
	reqs := g.CodexModel.ResponseRequests()[n:]
	require.Len(t, reqs, 2, "the model calls reached the gateway's upstream, not the planted provider")
	for _, req := range reqs {
		assert.Equal(t, offlineKey, req.APIKey)
		// The resumed session holds turn 1 (its command, and the notice
		// of the AGENTS.md it planted, which the CLI read mid-turn): what
		// turn 2 adds comes after turn 1's answer.
		turn2 := 0
		for i, it := range req.Body.Input {
			if it.Type == "message" && it.Role == "assistant" {
				turn2 = i + 1
			}
		}
		require.NotZero(t, turn2)
		for i, it := range req.Body.Input {
			if i < turn2 && it.Role != "developer" {
				continue
			}
			text := it.Content.Text() + it.Output.Text()
			assert.NotContains(t, text, "PLANTED-", "item %d (%s %s): no planted instructions, AGENTS.md, prompt or skill", i, it.Type, it.Role)
		}
		for _, name := range req.ToolNames() {
			assert.NotContains(t, name, "planted", "no planted MCP server's tools")
		}
	}
	left, err := filepath.Glob(filepath.Join(ws, ".marker-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no planted notify, MCP server or hook ran")
}
