package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// textTimer counts a streamed answer's text deltas and the time from the
// first to the last, as clientResult reports them.
type textTimer struct {
	r     *clientResult
	first time.Time
}

func (tt *textTimer) delta(d string) {
	if d == "" {
		return
	}
	tt.r.Parts++
	if tt.first.IsZero() {
		tt.first = time.Now()
	}
	tt.r.SpreadMs = time.Since(tt.first).Milliseconds()
}

// goResponsesClient is openai-go v3 on the Responses API.
func goResponsesClient(ctx context.Context, base, user, mode string) clientResult {
	client := sdk.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"))
	p := responses.ResponseNewParams{Model: "coder", User: sdk.String(user),
		Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String("run the slow build")}}
	var r clientResult
	usage := func(u responses.ResponseUsage) *clientUsage {
		return &clientUsage{Prompt: u.InputTokens, Completion: u.OutputTokens, Total: u.TotalTokens}
	}
	if mode == "turns" {
		first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "coder", User: sdk.String(user),
			Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String(quickPrompt)}})
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.IDs = append(r.IDs, first.ID)
		p.PreviousResponseID = sdk.String(first.ID)
	}
	if mode == "plain" {
		resp, err := client.Responses.New(ctx, p)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.IDs = append(r.IDs, resp.ID)
		r.Text, r.Finish, r.Usage = resp.OutputText(), string(resp.Status), usage(resp.Usage)
		return r
	}
	s := client.Responses.NewStreaming(ctx, p)
	defer func() { _ = s.Close() }()
	var text strings.Builder
	tt := &textTimer{r: &r}
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
			tt.delta(ev.Delta)
		case "response.completed":
			r.IDs = append(r.IDs, ev.Response.ID)
			r.Finish, r.Usage = string(ev.Response.Status), usage(ev.Response.Usage)
		}
	}
	r.Text = text.String()
	if err := s.Err(); err != nil {
		r.Error = err.Error()
	}
	return r
}

// goMessagesClient is anthropic-sdk-go on the Messages API, accumulating
// the stream with the SDK's own Message.Accumulate.
func goMessagesClient(ctx context.Context, base, user, mode string) clientResult {
	client := anthropic.NewClient(aoption.WithBaseURL(strings.TrimSuffix(base, "/v1")), aoption.WithAPIKey("unused"))
	p := anthropic.MessageNewParams{Model: "coder", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("run the slow build"))},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String(user)}}
	var r clientResult
	var msg anthropic.Message
	if mode == "plain" {
		m, err := client.Messages.New(ctx, p)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		msg = *m
	} else {
		s := client.Messages.NewStreaming(ctx, p)
		defer func() { _ = s.Close() }()
		tt := &textTimer{r: &r}
		for s.Next() {
			ev := s.Current()
			if err := msg.Accumulate(ev); err != nil {
				r.Error = err.Error()
				return r
			}
			if ev.Type == "content_block_delta" {
				tt.delta(ev.Delta.Text)
			}
		}
		if err := s.Err(); err != nil {
			r.Error = err.Error()
			return r
		}
	}
	var text strings.Builder
	for _, b := range msg.Content {
		text.WriteString(b.Text)
	}
	u := msg.Usage
	prompt := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	r.Text, r.Finish = text.String(), string(msg.StopReason)
	r.Usage = &clientUsage{Prompt: prompt, Completion: u.OutputTokens, Total: prompt + u.OutputTokens}
	return r
}

// curlDoorClient posts to door (responses or messages) with curl (-N for
// the stream) and reads the answer itself: the SSE events by the
// specification's rules (event and data lines until a blank line, comment
// lines skipped and counted), then the events' JSON.
func curlDoorClient(door string) func(ctx context.Context, base, user, mode string) clientResult {
	return func(ctx context.Context, base, user, mode string) clientResult {
		stream := mode == "stream"
		req := map[string]any{"model": "coder", "stream": stream}
		if door == "responses" {
			req["user"], req["input"] = user, "run the slow build"
		} else {
			req["max_tokens"], req["metadata"] = 1024, map[string]string{"user_id": user}
			req["messages"] = []map[string]string{{"role": "user", "content": "run the slow build"}}
		}
		body, err := json.Marshal(req)
		if err != nil {
			return clientResult{Error: err.Error()}
		}
		args := []string{"-sS", "--fail-with-body", "-H", "Content-Type: application/json", "--data-binary", "@-", base + "/" + door}
		if stream {
			args = append([]string{"-N"}, args...)
		}
		cmd := exec.CommandContext(ctx, "curl", args...)
		cmd.Stdin = bytes.NewReader(body)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		var r clientResult
		if !stream {
			out, err := cmd.Output()
			if err != nil {
				return clientResult{Error: fmt.Sprintf("curl: %v: %s %s", err, out, stderr.String())}
			}
			doorAnswer(door, "", out, &r, nil)
			return r
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return clientResult{Error: err.Error()}
		}
		if err := cmd.Start(); err != nil {
			return clientResult{Error: err.Error()}
		}
		var text strings.Builder
		tt := &textTimer{r: &r}
		var name string
		var data []string
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data != nil {
					if name == "ping" && strings.Join(data, "\n") == `{"type":"ping"}` {
						r.KeepAlives++
					}
					doorAnswer(door, name, []byte(strings.Join(data, "\n")), &r, func(d string) { text.WriteString(d); tt.delta(d) })
				}
				name, data = "", nil
			case strings.HasPrefix(line, ":"):
				r.KeepAlives++
			case strings.HasPrefix(line, "event:"):
				name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			default:
				r.Error = fmt.Sprintf("curl read a line that is not SSE: %q", line)
			}
		}
		scanErr := sc.Err()
		waitErr := cmd.Wait()
		switch {
		case data != nil:
			r.Error = fmt.Sprintf("the stream ended inside an event: %q", data)
		case scanErr != nil:
			r.Error = "reading curl's output: " + scanErr.Error()
		case waitErr != nil:
			r.Error = fmt.Sprintf("curl: %v: %s", waitErr, stderr.String())
		}
		r.Text = text.String()
		return r
	}
}

// doorAnswer reads one event of a door's stream (name is its SSE event
// name; "" for a whole answer) into r, handing text deltas to delta.
func doorAnswer(door, name string, data []byte, r *clientResult, delta func(string)) {
	var v struct {
		Type     string
		Delta    json.RawMessage
		Response *struct {
			Status string
			Usage  struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
				TotalTokens  int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		// A whole answer of each door.
		Status     string
		StopReason string `json:"stop_reason"`
		Output     []struct {
			Type    string
			Content []struct{ Text string }
		}
		Content []struct{ Type, Text string }
		Usage   json.RawMessage
		Error   json.RawMessage
	}
	if err := json.Unmarshal(data, &v); err != nil {
		r.Error = fmt.Sprintf("event %q is not JSON: %q: %v", name, data, err)
		return
	}
	if v.Type == "error" || v.Type == "response.failed" {
		r.Error = "error event: " + string(data)
		return
	}
	var u struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	}
	usage := func(raw json.RawMessage) {
		if json.Unmarshal(raw, &u) == nil {
			prompt := u.InputTokens
			if door == "messages" {
				prompt += u.CacheReadInputTokens + u.CacheCreationInputTokens
			}
			r.Usage = &clientUsage{Prompt: prompt, Completion: u.OutputTokens, Total: prompt + u.OutputTokens}
		}
	}
	switch {
	case name == "" && door == "responses":
		var text strings.Builder
		for _, o := range v.Output {
			for _, c := range o.Content {
				if o.Type == "message" {
					text.WriteString(c.Text)
				}
			}
		}
		r.Text, r.Finish = text.String(), v.Status
		usage(v.Usage)
	case name == "" && door == "messages":
		var text strings.Builder
		for _, c := range v.Content {
			if c.Type == "text" {
				text.WriteString(c.Text)
			}
		}
		r.Text, r.Finish = text.String(), v.StopReason
		usage(v.Usage)
	case v.Type == "response.output_text.delta":
		var d string
		_ = json.Unmarshal(v.Delta, &d)
		delta(d)
	case v.Type == "response.completed":
		r.Finish = v.Response.Status
		r.Usage = &clientUsage{Prompt: v.Response.Usage.InputTokens, Completion: v.Response.Usage.OutputTokens, Total: v.Response.Usage.TotalTokens}
	case v.Type == "content_block_delta":
		var d struct{ Type, Text string }
		if json.Unmarshal(v.Delta, &d) == nil && d.Type == "text_delta" {
			delta(d.Text)
		}
	case v.Type == "message_delta":
		var d struct {
			StopReason string `json:"stop_reason"`
		}
		_ = json.Unmarshal(v.Delta, &d)
		r.Finish = d.StopReason
		usage(v.Usage)
	}
}
