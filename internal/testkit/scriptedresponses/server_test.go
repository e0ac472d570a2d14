package scriptedresponses_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sr "github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
)

func client(s *sr.Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.URL), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func params() responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
}

// TestStreamAgreesWithCompleted reads a streamed answer with openai-go:
// the deltas join into the items response.completed carries, and the
// usage is there.
func TestStreamAgreesWithCompleted(t *testing.T) {
	turn := sr.Turn{Reasoning: "thinking hard", Text: "héllo wörld ✓ fine", Pieces: 5,
		Calls: []sr.Call{sr.NewCall("exec_command", map[string]string{"cmd": "echo ü"}), sr.ApplyPatch("a.txt", "x\n")},
		Usage: &sr.Usage{InputTokens: 50, OutputTokens: 7, CachedTokens: 20}}
	s := sr.Start(sr.WithTurns(turn))
	defer s.Close()
	c := client(s)
	st := c.Responses.NewStreaming(context.Background(), params())
	var text, reasoning, args, input strings.Builder
	var done *responses.Response
	seq := int64(-1)
	for st.Next() {
		ev := st.Current()
		assert.Equal(t, seq+1, ev.SequenceNumber, "sequence numbers count up")
		seq = ev.SequenceNumber
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.reasoning_summary_text.delta":
			reasoning.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.custom_tool_call_input.delta":
			input.WriteString(ev.Delta)
		case "response.completed":
			r := ev.Response
			done = &r
		}
	}
	require.NoError(t, st.Err())
	require.NotNil(t, done, "the stream ends with response.completed")
	assert.Equal(t, turn.Text, text.String())
	assert.Equal(t, turn.Reasoning, reasoning.String())
	assert.JSONEq(t, turn.Calls[0].Arguments, args.String())
	assert.Equal(t, turn.Calls[1].Arguments, input.String())
	require.Len(t, done.Output, 4)
	assert.Equal(t, []string{"reasoning", "message", "function_call", "custom_tool_call"},
		[]string{done.Output[0].Type, done.Output[1].Type, done.Output[2].Type, done.Output[3].Type})
	assert.Equal(t, turn.Text, done.OutputText())
	assert.EqualValues(t, 50, done.Usage.InputTokens)
	assert.EqualValues(t, 20, done.Usage.InputTokensDetails.CachedTokens)
	req := s.ResponseRequests()[0]
	assert.Equal(t, "sk-test", req.APIKey)
	assert.Equal(t, "hi", req.UserPrompt())
}

// TestNotStreamed answers a request without stream as one JSON response.
func TestNotStreamed(t *testing.T) {
	s := sr.Start(sr.WithTurns(sr.Say("plain")))
	defer s.Close()
	c := client(s)
	r, err := c.Responses.New(context.Background(), params())
	require.NoError(t, err)
	assert.Equal(t, "plain", r.OutputText())
	assert.Equal(t, responses.ResponseStatusCompleted, r.Status)
}

// TestFailures covers the scripted failures: an HTTP error in OpenAI's
// shape, response.failed, a cut stream, and any other path.
func TestFailures(t *testing.T) {
	s := sr.Start(sr.WithTurns(sr.Fail(sr.ErrRateLimited),
		sr.Turn{Text: "partial", Failed: &sr.APIError{Code: "server_error", Message: "boom"}},
		sr.Turn{Text: "partial", Cut: true}))
	defer s.Close()
	c := client(s)
	_, err := c.Responses.New(context.Background(), params())
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	assert.Equal(t, "rate_limit_exceeded", apiErr.Code)

	st := c.Responses.NewStreaming(context.Background(), params())
	var types []string
	for st.Next() {
		types = append(types, st.Current().Type)
	}
	assert.Equal(t, "response.failed", types[len(types)-1])
	assert.NotContains(t, types, "response.completed")

	st = c.Responses.NewStreaming(context.Background(), params())
	types = nil
	for st.Next() {
		types = append(types, st.Current().Type)
	}
	assert.Equal(t, "response.output_text.delta", types[len(types)-1], "the cut stream stops after the first delta")

	resp, err := http.Get(s.URL + "/models")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Len(t, s.Requests(), 4, "every request is recorded, the refused one too")
	assert.Len(t, s.ResponseRequests(), 3)
}

// TestToolResults reads a follow-up request the way the Codex CLI sends
// it: the call outputs after the last message, with their calls.
func TestToolResults(t *testing.T) {
	s := sr.Start(sr.WithScript(sr.Demo()))
	defer s.Close()
	body := `{"model":"m","stream":false,"input":[
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"write it"}]},
	 {"type":"custom_tool_call","call_id":"c1","name":"apply_patch","input":"*** Begin Patch"},
	 {"type":"custom_tool_call_output","call_id":"c1","output":"Success."},
	 {"type":"function_call","call_id":"c2","name":"exec_command","arguments":"{\"cmd\":\"cat hello.txt\"}"},
	 {"type":"function_call_output","call_id":"c2","output":"Chunk ID: 1\nWall time: 0\nOutput:\nhello from the sandbox\n"}]}`
	resp, err := http.Post(s.URL+"/responses", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_ = resp.Body.Close()
	req := s.ResponseRequests()[0]
	res := req.NewToolResults()
	require.Len(t, res, 2)
	assert.Equal(t, "apply_patch", res[0].Name)
	assert.Equal(t, "exec_command", res[1].Name)
	assert.Equal(t, "hello from the sandbox\n", res[1].CommandOutput())
	assert.Equal(t, "write it", req.UserPrompt())
	assert.Equal(t, "*** Begin Patch\n*** Add File: f\n+a\n+b\n*** End Patch\n", sr.Patch("f", "a\nb\n"))
}
