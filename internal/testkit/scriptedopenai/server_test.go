package scriptedopenai_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
)

func client(s *scriptedopenai.Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.URL), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func params() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
}

// TestStreamAccumulates checks the stream against openai-go's own
// accumulator: pieces join into the whole text and both parallel calls.
func TestStreamAccumulates(t *testing.T) {
	turn := scriptedopenai.Turn{Reasoning: "thinking hard", Text: "héllo wörld ✓ fine", Pieces: 5,
		Calls: []scriptedopenai.Call{scriptedopenai.NewCall("Bash", map[string]string{"command": "echo ü"}), scriptedopenai.NewCall("Read", map[string]string{"file_path": "/x"})},
		Usage: &scriptedopenai.Usage{PromptTokens: 50, CompletionTokens: 7, CachedTokens: 20}}
	s := scriptedopenai.Start(scriptedopenai.WithTurns(turn))
	defer s.Close()
	c := client(s)
	st := c.Chat.Completions.NewStreaming(context.Background(), params())
	var acc openai.ChatCompletionAccumulator
	chunks, reasoning := 0, ""
	for st.Next() {
		ch := st.Current()
		acc.AddChunk(ch)
		chunks++
		if len(ch.Choices) > 0 {
			if f, ok := ch.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
				reasoning += f.Raw()[1 : len(f.Raw())-1]
			}
		}
	}
	require.NoError(t, st.Err())
	assert.Greater(t, chunks, 10, "text and arguments arrive in pieces")
	assert.Equal(t, "thinking hard", reasoning)
	ch := acc.Choices[0]
	assert.Equal(t, turn.Text, ch.Message.Content)
	require.Len(t, ch.Message.ToolCalls, 2)
	assert.JSONEq(t, turn.Calls[0].Arguments, ch.Message.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "Read", ch.Message.ToolCalls[1].Function.Name)
	assert.Equal(t, "tool_calls", ch.FinishReason)
	assert.EqualValues(t, 50, acc.Usage.PromptTokens)
	assert.EqualValues(t, 20, acc.Usage.PromptTokensDetails.CachedTokens)
	assert.Equal(t, "sk-test", s.Requests()[0].APIKey)
	assert.Equal(t, "hi", s.Requests()[0].LastUserText())
}

func TestNonStreamAndErrors(t *testing.T) {
	s := scriptedopenai.Start(scriptedopenai.WithTurns(
		scriptedopenai.Say("two"),
		scriptedopenai.Fail(&scriptedopenai.APIError{Status: http.StatusTooManyRequests, Message: "slow down", RetryAfter: "3"}),
		scriptedopenai.Fail(scriptedopenai.ContextTooLong()),
	))
	defer s.Close()
	c := client(s)
	r, err := c.Chat.Completions.New(context.Background(), params())
	require.NoError(t, err)
	assert.Equal(t, "two", r.Choices[0].Message.Content)
	assert.Equal(t, "stop", r.Choices[0].FinishReason)

	_, err = c.Chat.Completions.New(context.Background(), params())
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	assert.Equal(t, "3", apiErr.Response.Header.Get("Retry-After"))
	assert.Contains(t, apiErr.Message, "slow down")

	_, err = c.Chat.Completions.New(context.Background(), params())
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "context_length_exceeded", apiErr.Code)

	_, err = c.Chat.Completions.New(context.Background(), params())
	require.ErrorAs(t, err, &apiErr, "an empty queue without a script is an error, not a hang")
	assert.Equal(t, http.StatusInternalServerError, apiErr.StatusCode)
}

func TestMidStreamError(t *testing.T) {
	s := scriptedopenai.Start(scriptedopenai.WithTurns(scriptedopenai.Turn{Text: "partial answer here",
		MidStreamError: &scriptedopenai.APIError{Message: "upstream overloaded"}}))
	defer s.Close()
	c := client(s)
	st := c.Chat.Completions.NewStreaming(context.Background(), params())
	for st.Next() {
	}
	require.Error(t, st.Err())
	assert.Contains(t, st.Err().Error(), "upstream overloaded")
}
