package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

func sdkClient(st *stack, opts ...option.RequestOption) sdk.Client {
	return sdk.NewClient(append([]option.RequestOption{
		option.WithBaseURL(st.srv.URL + "/v1/"), option.WithAPIKey("unused"),
	}, opts...)...)
}

func params(user string) sdk.ChatCompletionNewParams {
	return sdk.ChatCompletionNewParams{
		Model:    "coder",
		Messages: []sdk.ChatCompletionMessageParamUnion{sdk.SystemMessage("be brief"), sdk.UserMessage("write hello.txt")},
		User:     sdk.String(user),
	}
}

func TestGoSDKStreamedTextEqualsTheCompletion(t *testing.T) {
	st := newStack(t)
	script, want := agentRun()
	st.setScript("1", script)
	st.setScript("2", script)
	client := sdkClient(st)
	ctx := context.Background()

	comp, err := client.Chat.Completions.New(ctx, params("alice:1"))
	require.NoError(t, err)
	require.Len(t, comp.Choices, 1)
	assert.Equal(t, want, comp.Choices[0].Message.Content)
	assert.Equal(t, "stop", comp.Choices[0].FinishReason)
	assert.Equal(t, int64(120+1000+5000), comp.Usage.PromptTokens)
	assert.Equal(t, int64(40), comp.Usage.CompletionTokens)
	assert.Equal(t, int64(5000), comp.Usage.PromptTokensDetails.CachedTokens)
	assert.Contains(t, comp.JSON.ExtraFields["agentbox"].Raw(), `"kind":"done"`, "the extension reaches SDK users as an extra field")

	p := params("alice:2")
	p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, p)
	var text strings.Builder
	var acc sdk.ChatCompletionAccumulator
	var chunks []sdk.ChatCompletionChunk
	kinds := map[string]int{}
	for stream.Next() {
		c := stream.Current()
		require.True(t, acc.AddChunk(c))
		chunks = append(chunks, c)
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if f, ok := c.JSON.ExtraFields["agentbox"]; ok {
			var ext struct{ Kind string }
			require.NoError(t, json.Unmarshal([]byte(f.Raw()), &ext))
			kinds[ext.Kind]++
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())

	assert.Equal(t, comp.Choices[0].Message.Content, text.String(), "streamed text == non-streamed content of the same run")
	assert.Equal(t, want, acc.Choices[0].Message.Content)
	assert.Greater(t, len(chunks), 6, "the long text is split across chunks")
	last := chunks[len(chunks)-1]
	assert.Empty(t, last.Choices, "usage comes in a last chunk of its own")
	assert.Equal(t, comp.Usage.PromptTokens, last.Usage.PromptTokens, "usage arrives in the final chunk")
	assert.Equal(t, comp.Usage.CompletionTokens, last.Usage.CompletionTokens)
	for _, c := range chunks[:len(chunks)-1] {
		assert.Zero(t, c.Usage.TotalTokens, "no usage before the final chunk")
	}
	assert.Equal(t, "stop", chunks[len(chunks)-2].Choices[0].FinishReason)
	assert.Equal(t, map[string]int{"sandbox": 1, "init": 1, "thinking": 1, "tool_use": 1, "tool_result": 1, "done": 1}, kinds)
}

func TestGoSDKErrorsAreOpenAIErrors(t *testing.T) {
	reject := hooks.Funcs{CreateFunc: func(context.Context, *hooks.Context, []executor.Message) (*hooks.CreateResult, error) {
		return nil, errors.New("Node.js is required")
	}}
	for name, tc := range map[string]struct {
		model, user string
		hooks       hooks.Hooks
		script      scripted.Script
		status      int
		code, param string
		msg         string
		// streamStarted: the streamed variant fails after its first event.
		streamStarted bool
	}{
		"unknown model":   {model: "gpt-nope", user: "alice:1", status: 404, code: "model_not_found", param: "model", msg: `"gpt-nope" does not exist`},
		"missing chat id": {model: "coder", user: "alice", status: 400, code: "invalid_request", param: "chat", msg: "X-Agentbox-Chat"},
		"hook rejects":    {model: "coder", user: "alice:1", hooks: reject, status: 422, code: "rejected_by_hook", msg: "Node.js is required", streamStarted: true},
		"agent fails":     {model: "coder", user: "alice:1", script: scripted.Script{Exit: 1}, status: 502, code: "agent_failed", msg: "exit code 1", streamStarted: true},
		"sandbox start":   {model: "coder", user: "alice:1", status: 500, code: "sandbox_start_failed", msg: "could not start"},
	} {
		for _, streamed := range []bool{false, true} {
			t.Run(name+map[bool]string{true: " streamed", false: ""}[streamed], func(t *testing.T) {
				var opts []stackOption
				if tc.hooks != nil {
					opts = append(opts, withStackHooks(tc.hooks))
				}
				st := newStack(t, opts...)
				if tc.code == "sandbox_start_failed" {
					st.ex.CreateErr = errors.New("docker: image not found")
				}
				st.setScript("1", tc.script)
				client := sdkClient(st, option.WithMaxRetries(2))
				p := params(tc.user)
				p.Model = tc.model
				var err error
				if streamed {
					stream := client.Chat.Completions.NewStreaming(context.Background(), p)
					for stream.Next() {
					}
					err = stream.Err()
					_ = stream.Close()
				} else {
					_, err = client.Chat.Completions.New(context.Background(), p)
				}
				require.Error(t, err)
				assert.Equal(t, int64(1), st.requests.Load(), "the SDK does not retry: x-should-retry is false")
				if streamed && tc.streamStarted {
					assert.ErrorContains(t, err, "received error while streaming")
					assert.ErrorContains(t, err, tc.msg)
					assert.ErrorContains(t, err, tc.code)
					return
				}
				var apiErr *sdk.Error
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, tc.status, apiErr.StatusCode)
				assert.Equal(t, tc.code, apiErr.Code)
				assert.Equal(t, tc.param, apiErr.Param)
				assert.Contains(t, apiErr.Message, tc.msg)
			})
		}
	}
}

func TestGoSDKRetriesABusyChat(t *testing.T) {
	st := newStack(t)
	s, _ := agentRun()
	s.Block = true
	st.setScript("1", s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c1 := sdkClient(st)
	first := c1.Chat.Completions.NewStreaming(ctx, params("alice:1"))
	require.True(t, first.Next(), "the first request holds the chat")

	c2 := sdkClient(st, option.WithMaxRetries(1))
	_, err := c2.Chat.Completions.New(context.Background(), params("alice:1"))
	var apiErr *sdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 409, apiErr.StatusCode)
	assert.Equal(t, "chat_busy", apiErr.Code)
	assert.Equal(t, int64(3), st.requests.Load(), "busy is retry-safe: the SDK tried again (1 + 1 retry, plus the first request)")
	cancel()
	_ = first.Close()
}
