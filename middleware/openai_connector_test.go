package middleware_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
)

// TestE2EOpenAIConnector: a claude assistant on an OpenAI-compatible
// connector. The real CLI in a real container speaks Anthropic's
// Messages API to the model proxy, which translates each call to Chat
// Completions for the (scripted) provider and its answers back: the agent
// writes and reads a file with two tool calls, the answer and the metered
// usage reach the client, and only the provider is called, with the
// connector's key and model.
func TestE2EOpenAIConnector(t *testing.T) {
	const providerKey = "sk-provider-secret"
	prov := scriptedopenai.Start(scriptedopenai.WithScript(scriptedopenai.Demo(executor.ContainerWorkdir)))
	t.Cleanup(prov.Close)
	env := newE2E(t, nil, func(a *middleware.Assistant) {
		a.Sandbox.Run.Model = "deepseek-chat"
		a.Sandbox.Connector = middleware.Connector{Upstream: prov.URL, Key: providerKey,
			Translate: agentbox.TranslateOpenAI(anthropicopenai.Options{StreamUsage: true, MaxTokensCeiling: 8192})}
	})

	p := e2eParams("alice:oai", "Write hello.txt and cat it.")
	p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	stream := env.client.Chat.Completions.NewStreaming(context.Background(), p)
	var text strings.Builder
	var last sdk.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		last = c
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Contains(t, text.String(), "printed: "+strings.TrimSpace(scriptedopenai.DemoContent))
	assert.Positive(t, last.Usage.PromptTokens, "the proxy metered the translated usage")
	wsDir, err := executor.WorkspaceDir(env.dataDir, "alice", "oai")
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(wsDir, scriptedopenai.DemoFile))
	require.NoError(t, err)
	assert.Equal(t, scriptedopenai.DemoContent, string(got))

	var calls int
	for _, r := range prov.Requests() {
		if !strings.HasSuffix(r.Path, "/chat/completions") {
			continue
		}
		calls++
		assert.Equal(t, providerKey, r.APIKey, "the connector's key, added on the host")
		assert.Equal(t, "deepseek-chat", r.Body.Model)
		assert.LessOrEqual(t, r.Body.MaxTokens, int64(8192), "the connector's ceiling")
	}
	assert.GreaterOrEqual(t, calls, 3, "Write, Bash and the answer")
	assert.Empty(t, env.api.Requests(), "nothing went to an Anthropic host")
}
