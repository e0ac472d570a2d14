package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
)

// The doors' run through the example gateway: the coder assistant's agent
// runs a shell command that says nothing for 60 s (the offline model
// answers "$ command" with the Bash tool), so that every client lives
// through the doors' keep-alives over a real sandbox.
const (
	// Claude Code refuses a command that starts with a long sleep; one
	// that starts with anything else runs.
	slowCommand = "pwd >/dev/null; sleep 60; echo built"
	slowPrompt  = "$ " + slowCommand
	// turnsPrompt is the second turn of a conversation whose first wrote
	// hello.txt (demoPrompt): it reads the file the first turn left.
	turnsPrompt = "$ cat " + scriptedapi.DemoFile + "; sleep 60; echo built"
)

// doorResult is what one client of the doors got.
type doorResult struct {
	Text   string   `json:"text"`
	Finish string   `json:"finish"`
	Error  string   `json:"error"`
	IDs    []string `json:"ids"`
	Usage  *struct {
		Prompt, Completion, Total int64
	} `json:"usage"`
}

// TestDoorsOverASilentRun: the official SDKs of the Responses and Messages
// APIs (openai-go v3 and the openai npm package, anthropic-sdk-go and
// @anthropic-ai/sdk), the Vercel AI SDK through its OpenAI Responses and
// Anthropic providers, and curl get the answer of a sandboxed run with
// 60 s of silence from the example gateway, streamed and not; on
// Responses a second turn by previous_response_id alone continues the
// chat of the first (its workspace and its agent session). The runs go at
// once, so the test takes about one silence.
func TestDoorsOverASilentRun(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("-short: the doors' runs wait through a 60 s silence")
	}
	var scripts []string
	for _, f := range []string{"responses_client.mjs", "anthropic_client.mjs", "vercel_doors.mjs"} {
		scripts = append(scripts, filepath.Join("..", "..", "middleware", "openai", "testdata", "clients", f))
	}
	nodeDir := testenv.NodePackage(t, "clients", filepath.Join("..", "..", "middleware", "openai", "testdata", "clients"), scripts...)
	if _, err := exec.LookPath("curl"); err != nil {
		if testenv.InCI() {
			t.Fatal("CI=true and curl is not on PATH; install curl")
		}
		t.Skip("curl is not on PATH; install curl")
	}
	g, _ := startGateway(t, func(o *Options) {
		o.Admission = middleware.Admission{MaxRuns: 32, MaxRunsPerUser: 32, MaxMemoryBytes: -1}
	})
	base := g.URL + "/v1"
	node := func(script string, args ...string) func(ctx context.Context, user string) doorResult {
		return func(ctx context.Context, user string) doorResult {
			cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
			cmd.Dir = nodeDir
			cmd.Env = append(os.Environ(), "BASE_URL="+base, "AGENTBOX_USER="+user, "PROMPT="+slowPrompt, "QUICK_PROMPT="+demoPrompt)
			if args[len(args)-1] == "turns" {
				cmd.Env = append(cmd.Env, "PROMPT="+turnsPrompt)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var r doorResult
			if err == nil {
				err = json.Unmarshal(out, &r)
			}
			if err != nil {
				r.Error = fmt.Sprintf("node %s %v: %v: %s %s", script, args, err, out, stderr.String())
			}
			return r
		}
	}
	clients := map[string]func(ctx context.Context, user string) doorResult{
		"responses.openai-go.stream":     func(ctx context.Context, u string) doorResult { return goResponses(ctx, base, u, "stream") },
		"responses.openai-go.plain":      func(ctx context.Context, u string) doorResult { return goResponses(ctx, base, u, "plain") },
		"responses.openai-go.turns":      func(ctx context.Context, u string) doorResult { return goResponses(ctx, base, u, "turns") },
		"responses.openai-node.stream":   node("responses_client.mjs", "stream"),
		"responses.openai-node.plain":    node("responses_client.mjs", "plain"),
		"responses.openai-node.turns":    node("responses_client.mjs", "turns"),
		"responses.vercel-ai.stream":     node("vercel_doors.mjs", "responses", "stream"),
		"responses.curl.stream":          func(ctx context.Context, u string) doorResult { return curlDoor(ctx, base, "responses", u) },
		"messages.anthropic-go.stream":   func(ctx context.Context, u string) doorResult { return goMessages(ctx, g.URL, u, true) },
		"messages.anthropic-go.plain":    func(ctx context.Context, u string) doorResult { return goMessages(ctx, g.URL, u, false) },
		"messages.anthropic-node.stream": node("anthropic_client.mjs", "stream"),
		"messages.anthropic-node.plain":  node("anthropic_client.mjs", "plain"),
		"messages.vercel-ai.stream":      node("vercel_doors.mjs", "messages", "stream"),
		"messages.curl.stream":           func(ctx context.Context, u string) doorResult { return curlDoor(ctx, base, "messages", u) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	results := map[string]doorResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for name, run := range clients {
		wg.Go(func() {
			user := "door:" + strings.ReplaceAll(name, ".", "-")
			if strings.HasSuffix(name, ".turns") {
				user = "door" // the first response names the chat
			}
			r := run(ctx, user)
			mu.Lock()
			results[name] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d clients over a 60 s silent sandboxed run took %v in all", len(clients), time.Since(start).Round(time.Millisecond))
	for name, r := range results {
		t.Run(name, func(t *testing.T) {
			require.Empty(t, r.Error)
			want := "`" + slowCommand + "` printed:\nbuilt"
			if strings.HasSuffix(name, ".turns") {
				want = "`cat " + scriptedapi.DemoFile + "; sleep 60; echo built` printed:\n" + strings.TrimSpace(scriptedapi.DemoContent) + "\nbuilt"
				assert.Len(t, r.IDs, 2)
			}
			assert.Contains(t, r.Text, want, "the answer after the silence")
			require.NotNil(t, r.Usage)
			assert.Positive(t, r.Usage.Prompt)
			assert.Positive(t, r.Usage.Completion)
			assert.Contains(t, []string{"completed", "end_turn", "stop"}, r.Finish)
		})
	}
}

// goResponses is openai-go v3 on the gateway's Responses door.
func goResponses(ctx context.Context, base, user, mode string) doorResult {
	c := sdk.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"))
	var r doorResult
	p := responses.ResponseNewParams{Model: demoAssistant, User: sdk.String(user),
		Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String(slowPrompt)}}
	if mode == "turns" {
		first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: demoAssistant, User: sdk.String(user),
			Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String(demoPrompt)}})
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.IDs = append(r.IDs, first.ID)
		p.PreviousResponseID = sdk.String(first.ID)
		p.Input = responses.ResponseNewParamsInputUnion{OfString: sdk.String(turnsPrompt)}
	}
	var resp responses.Response
	if mode == "plain" {
		got, err := c.Responses.New(ctx, p)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		resp = *got
	} else {
		s := c.Responses.NewStreaming(ctx, p)
		for s.Next() {
			if ev := s.Current(); ev.Type == "response.completed" {
				resp = ev.Response
			}
		}
		if err := s.Err(); err != nil {
			r.Error = err.Error()
			return r
		}
	}
	r.IDs = append(r.IDs, resp.ID)
	r.Text, r.Finish = resp.OutputText(), string(resp.Status)
	r.Usage = &struct{ Prompt, Completion, Total int64 }{resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.Usage.TotalTokens}
	return r
}

// goMessages is anthropic-sdk-go on the gateway's Messages door.
func goMessages(ctx context.Context, url, user string, stream bool) doorResult {
	c := anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("unused"))
	p := anthropic.MessageNewParams{Model: demoAssistant, MaxTokens: 1024, Metadata: anthropic.MetadataParam{UserID: anthropic.String(user)},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(slowPrompt))}}
	var r doorResult
	var msg anthropic.Message
	if stream {
		s := c.Messages.NewStreaming(ctx, p)
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				r.Error = err.Error()
				return r
			}
		}
		if err := s.Err(); err != nil {
			r.Error = err.Error()
			return r
		}
	} else {
		got, err := c.Messages.New(ctx, p)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		msg = *got
	}
	for _, b := range msg.Content {
		r.Text += b.Text
	}
	u := msg.Usage
	r.Finish = string(msg.StopReason)
	r.Usage = &struct{ Prompt, Completion, Total int64 }{u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens, u.OutputTokens, 0}
	return r
}

// curlDoor streams one request with curl -N and reads the door's text
// deltas and final usage from the SSE events.
func curlDoor(ctx context.Context, base, door, user string) doorResult {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"user":%q,"input":%q}`, demoAssistant, user, slowPrompt)
	if door == "messages" {
		body = fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":1024,"metadata":{"user_id":%q},"messages":[{"role":"user","content":%q}]}`,
			demoAssistant, user, slowPrompt)
	}
	cmd := exec.CommandContext(ctx, "curl", "-sSN", "--fail-with-body", "-H", "Content-Type: application/json", "--data-binary", "@-", base+"/"+door)
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.Output()
	var r doorResult
	if err != nil {
		r.Error = fmt.Sprintf("curl: %v: %s", err, out)
		return r
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string
			Delta json.RawMessage
			Usage *struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			}
			Response *struct {
				Status string
				Usage  struct {
					InputTokens  int64 `json:"input_tokens"`
					OutputTokens int64 `json:"output_tokens"`
				}
			}
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.Error = fmt.Sprintf("event %q: %v", data, err)
			return r
		}
		switch ev.Type {
		case "response.output_text.delta":
			var d string
			_ = json.Unmarshal(ev.Delta, &d)
			r.Text += d
		case "content_block_delta":
			var d struct{ Text string }
			_ = json.Unmarshal(ev.Delta, &d)
			r.Text += d.Text
		case "response.completed":
			r.Finish = ev.Response.Status
			r.Usage = &struct{ Prompt, Completion, Total int64 }{ev.Response.Usage.InputTokens, ev.Response.Usage.OutputTokens, 0}
		case "message_delta":
			var d struct {
				StopReason string `json:"stop_reason"`
			}
			_ = json.Unmarshal(ev.Delta, &d)
			r.Finish = d.StopReason
			r.Usage = &struct{ Prompt, Completion, Total int64 }{ev.Usage.InputTokens, ev.Usage.OutputTokens, 0}
		case "error", "response.failed":
			r.Error = "error event: " + data
		}
	}
	return r
}
