package openairesponses

import (
	"context"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
)

// responsesClient is openai-go's Responses client over tr.
func responsesClient(tr http.RoundTripper) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://proxy/v1"), option.WithAPIKey("sk-connector"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: tr}))
}

// streamAll reads a streamed answer with openai-go and returns the
// completed response and the text deltas joined.
func streamAll(t *testing.T, c openai.Client, params responses.ResponseNewParams) (*responses.Response, string) {
	t.Helper()
	st := c.Responses.NewStreaming(context.Background(), params)
	var text string
	var done *responses.Response
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			r := ev.Response
			done = &r
		}
	}
	require.NoError(t, st.Err())
	require.NotNil(t, done, "the stream ends with response.completed")
	return done, text
}

// TestOfficialClientReadsTheTranslation reads both translations' streams
// with openai-go: text deltas join into the completed message, calls and
// usage are in the completed response.
func TestOfficialClientReadsTheTranslation(t *testing.T) {
	params := responses.ResponseNewParams{Model: "gpt-5.5", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "exec_command",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}}}}}}

	t.Run("chat", func(t *testing.T) {
		api := scriptedopenai.Start(scriptedopenai.WithTurns(scriptedopenai.Turn{Text: "héllo wörld", Pieces: 5,
			Calls: []scriptedopenai.Call{scriptedopenai.NewCall("exec_command", map[string]string{"cmd": "ls -la"})},
			Usage: &scriptedopenai.Usage{PromptTokens: 120, CompletionTokens: 9, CachedTokens: 100}}))
		defer api.Close()
		tr, err := NewChat(ChatOptions{BaseURL: api.URL, StreamUsage: true})
		require.NoError(t, err)
		r, text := streamAll(t, responsesClient(tr), params)
		assert.Equal(t, "héllo wörld", text)
		assert.Equal(t, "héllo wörld", r.OutputText())
		require.Len(t, r.Output, 2)
		assert.Equal(t, "exec_command", r.Output[1].Name)
		assert.JSONEq(t, `{"cmd":"ls -la"}`, r.Output[1].Arguments.OfString)
		assert.EqualValues(t, 120, r.Usage.InputTokens)
		assert.EqualValues(t, 100, r.Usage.InputTokensDetails.CachedTokens)
		assert.EqualValues(t, 9, r.Usage.OutputTokens)
		assert.True(t, api.Requests()[0].Body.StreamOptions.IncludeUsage)
	})

	t.Run("messages", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithTurns(scriptedapi.Turn{
			Blocks: []scriptedapi.Block{scriptedapi.Text("héllo wörld"), scriptedapi.ToolUse("exec_command", map[string]string{"cmd": "ls -la"})},
			Usage:  &scriptedapi.Usage{InputTokens: 20, OutputTokens: 9, CacheReadInputTokens: 100, CacheCreationInputTokens: 30}}))
		defer api.Close()
		tr, err := NewMessages(MessagesOptions{BaseURL: api.URL, Model: "claude-sonnet-4-5"})
		require.NoError(t, err)
		r, text := streamAll(t, responsesClient(tr), params)
		assert.Equal(t, "héllo wörld", text)
		require.Len(t, r.Output, 2)
		assert.Equal(t, "exec_command", r.Output[1].Name)
		assert.JSONEq(t, `{"cmd":"ls -la"}`, r.Output[1].Arguments.OfString)
		assert.EqualValues(t, 150, r.Usage.InputTokens, "input counts cache reads and writes, as OpenAI's does")
		assert.EqualValues(t, 100, r.Usage.InputTokensDetails.CachedTokens)
		got := api.MessageRequests()[0]
		assert.Equal(t, "claude-sonnet-4-5", got.Body.Model)
		assert.Equal(t, "sk-connector", got.APIKey)
		assert.Equal(t, []string{"exec_command"}, got.ToolNames())
	})
}
