package cursor

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

func baseRequest() executor.RunRequest {
	return executor.RunRequest{
		Messages:     []executor.Message{{Role: "user", Content: "Create hello.txt"}},
		SystemPrompt: "You are a careful coder.",
		Model:        "sonnet-4.5",
		Workdir:      "/workspace",
		Home:         "/home/agent",
		ModelBaseURL: "http://127.0.0.1:7000",
		APIKey:       "key_live_123",
	}
}

func TestInvocationShape(t *testing.T) {
	inv, err := New().Invocation(baseRequest())
	require.NoError(t, err)
	assert.Equal(t, []string{
		"cursor-agent", "-p", "--output-format", "stream-json", "--stream-partial-output",
		"--force", "--trust", "--workspace", "/workspace", "--model", "sonnet-4.5",
	}, inv.Args)
	assert.Equal(t, []string{
		"HOME=/home/agent", "PATH=/opt/agentbox/bin:/usr/local/bin:/usr/bin:/bin", "NO_COLOR=1", "CURSOR_API_KEY=key_live_123",
	}, inv.Env)
	assert.Equal(t, "Create hello.txt", string(inv.Stdin), "a single turn goes to stdin unchanged")
	assert.Equal(t, "---\ndescription: Instructions of the agentbox assistant (written by agentbox on every run)\nalwaysApply: true\n---\n\nYou are a careful coder.\n", string(inv.Files[RulesFile]))
	assert.Equal(t, `{"mcpServers":{}}`+"\n", string(inv.Files[MCPFile]))
	assert.Len(t, inv.Files, 2)
}

// TestInvocationKeepsKeyOutOfArgvAndFiles checks that the real key appears
// only in the CLI's environment.
func TestInvocationKeepsKeyOutOfArgvAndFiles(t *testing.T) {
	req := baseRequest()
	req.MCPConfig = []byte(`{"mcpServers":{"demo":{"command":"agentbox-helper","args":["mcp","demo"]}}}`)
	inv, err := New().Invocation(req)
	require.NoError(t, err)
	for _, a := range inv.Args {
		assert.NotContains(t, a, req.APIKey)
	}
	for name, f := range inv.Files {
		assert.NotContains(t, string(f), req.APIKey, name)
	}
	assert.NotContains(t, string(inv.Stdin), req.APIKey)
	assert.Contains(t, inv.Env, "CURSOR_API_KEY="+req.APIKey)
	for _, e := range inv.Env {
		assert.NotContains(t, e, "127.0.0.1", "the model proxy is not used by Cursor")
	}
}

func TestInvocationOptions(t *testing.T) {
	req := baseRequest()
	req.Model = ""
	req.MCPConfig = []byte(`{"mcpServers":{"demo":{"command":"agentbox-helper","args":["mcp","demo"]}}}`)
	req.Arguments = map[string]any{"model": "gpt-5", "force": false}
	req.Workdir = ""
	inv, err := New(WithProgram("/opt/cursor/agent"), WithoutPartialOutput()).Invocation(req)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"/opt/cursor/agent", "-p", "--output-format", "stream-json",
		"--trust", "--workspace", executor.ContainerWorkdir, "--model", "gpt-5", "--approve-mcps",
	}, inv.Args)
	assert.Equal(t, string(req.MCPConfig), string(inv.Files[MCPFile]))
}

func TestInvocationHistoryAndSystemMessages(t *testing.T) {
	req := baseRequest()
	req.SystemPrompt = ""
	req.Messages = []executor.Message{
		{Role: "system", Content: "Answer in French."},
		{Role: "user", Content: "Create hello.txt"},
		{Role: "assistant", Content: "Done."},
		{Role: "user", Content: "Now print it."},
	}
	inv, err := New().Invocation(req)
	require.NoError(t, err)
	want := "Earlier turns of this conversation, oldest first:\n\n<conversation_history>\n" +
		"<user>\nCreate hello.txt\n</user>\n<assistant>\nDone.\n</assistant>\n</conversation_history>\n\n" +
		"The user's latest message, which you are answering now:\n\nNow print it."
	assert.Equal(t, want, string(inv.Stdin))
	assert.True(t, strings.HasSuffix(string(inv.Files[RulesFile]), "\nAnswer in French.\n"))
}

// TestInvocationLongPrompt shows why the prompt goes through stdin: one
// argv element is capped at 128 KiB on Linux.
func TestInvocationLongPrompt(t *testing.T) {
	req := baseRequest()
	req.Messages = []executor.Message{{Role: "user", Content: strings.Repeat("x", 1<<20)}}
	inv, err := New().Invocation(req)
	require.NoError(t, err)
	assert.Len(t, inv.Stdin, 1<<20)
	for _, a := range inv.Args {
		assert.Less(t, len(a), 128<<10)
	}
}

func TestInvocationRulesWrittenWithoutInstructions(t *testing.T) {
	req := baseRequest()
	req.SystemPrompt = ""
	inv, err := New().Invocation(req)
	require.NoError(t, err)
	assert.Equal(t, "---\ndescription: Instructions of the agentbox assistant (written by agentbox on every run)\nalwaysApply: true\n---\n", string(inv.Files[RulesFile]))
}

func TestInvocationErrors(t *testing.T) {
	tests := map[string]struct {
		edit func(*executor.RunRequest)
		want string
	}{
		"no key":         {func(r *executor.RunRequest) { r.APIKey = " " }, "set the cursor connector's key"},
		"key with CR LF": {func(r *executor.RunRequest) { r.APIKey = "abc\n" }, "control character"},
		"no home":        {func(r *executor.RunRequest) { r.Home = "" }, "RunRequest.Home"},
		"no messages":    {func(r *executor.RunRequest) { r.Messages = nil }, "must end with a user message"},
		"ends with assistant": {func(r *executor.RunRequest) {
			r.Messages = append(r.Messages, executor.Message{Role: "assistant", Content: "hi"})
		}, "must end with a user message"},
		"empty prompt":    {func(r *executor.RunRequest) { r.Messages[0].Content = "  " }, "last user message is empty"},
		"bad role":        {func(r *executor.RunRequest) { r.Messages[0].Role = "tool" }, `role "tool"`},
		"bad mcp json":    {func(r *executor.RunRequest) { r.MCPConfig = []byte("{") }, "not valid JSON"},
		"mcp without key": {func(r *executor.RunRequest) { r.MCPConfig = []byte(`{"servers":{}}`) }, `no "mcpServers"`},
		"claude argument": {func(r *executor.RunRequest) { r.Arguments = map[string]any{"max_turns": 3} }, `"max_turns" is not supported by the cursor runner; supported: force, model`},
		"empty model":     {func(r *executor.RunRequest) { r.Arguments = map[string]any{"model": " "} }, "use a model name"},
		"force not bool":  {func(r *executor.RunRequest) { r.Arguments = map[string]any{"force": "yes"} }, "use true or false"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			tc.edit(&req)
			_, err := New().Invocation(req)
			require.Error(t, err)
			assert.ErrorIs(t, err, executor.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	req := baseRequest()
	req.APIKey = ""
	_, err := New().Invocation(req)
	assert.ErrorIs(t, err, ErrNoAPIKey)
}

func TestName(t *testing.T) {
	assert.Equal(t, "cursor", New().Name())
}
