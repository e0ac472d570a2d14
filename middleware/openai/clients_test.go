package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// silence is how long the matrix's run says nothing in the middle of its
// answer: four of the adapter's default heartbeat intervals, longer than
// the idle timeouts of common proxies, and what issue 15 asks for. A
// shorter silence would not show that clients live through keep-alives.
const silence = 60 * time.Second

// The matrix's answer: text before the silence, text after it (in two
// events, one with non-ASCII), and its usage.
var (
	beforeSilence = []string{"Starting the build; ", "it runs quietly for a minute. "}
	afterSilence  = []string{"The build passed ✓ ", "and the tests are green — done."}
	silentUsage   = executor.Usage{InputTokens: 1200, OutputTokens: 345, CacheReadInputTokens: 800}
)

// The quick first turn of the turns mode, which continues with the slow
// one by previous_response_id.
const (
	quickPrompt = "start the build"
	quickAnswer = "Starting."
)

// clientUsage is the usage as every client reports it: OpenAI's
// prompt/completion/total tokens.
type clientUsage struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
	Total      int64 `json:"total"`
}

// clientResult is what one client got from one request.
type clientResult struct {
	Text   string       `json:"text"`
	Usage  *clientUsage `json:"usage"`
	Finish string       `json:"finish"`
	// Parts counts the non-empty text deltas of a streamed answer.
	Parts int `json:"parts"`
	// SpreadMs is the time from the first text delta to the last one, as
	// the client saw them: near the silence when the client streams, near
	// zero when something buffered the answer.
	SpreadMs int64 `json:"spreadMs"`
	// Error is the client's failure, "" when it got an answer.
	Error string `json:"error"`
	// Done reports [DONE] as the last event (curl only: the SDKs hide it).
	Done bool `json:"-"`
	// KeepAlives counts the comment lines or ping events the client read
	// (curl only).
	KeepAlives int `json:"-"`
	// IDs are the responses' ids, in order (Responses clients).
	IDs []string `json:"ids"`
}

// silentRun is one request the silent handler served, by chat id.
type silentRun struct {
	requests  int
	requestID string
	stream    bool
	// messages are the last request's.
	messages []executor.Message
	// completed reports that the handler slept through the whole silence
	// and answered; false means the client went away (or never came).
	completed bool
	err       error
}

// silentHandler is a middleware.Handler that answers every request with
// the matrix's answer, going silent for silence between its two halves.
type silentHandler struct {
	mu   sync.Mutex
	runs map[string]*silentRun
}

func (h *silentHandler) Handle(ctx context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
	h.mu.Lock()
	run := h.runs[req.ChatID]
	if run == nil {
		run = &silentRun{}
		h.runs[req.ChatID] = run
	}
	run.requests++
	run.requestID, run.stream, run.messages = middleware.RequestID(ctx), req.Stream, req.Messages
	h.mu.Unlock()
	if last := req.Messages[len(req.Messages)-1]; last.Content == quickPrompt {
		// A conversation's quick first turn (the turns mode): no silence.
		return &middleware.Response{Content: quickAnswer, FinishReason: executor.FinishStop, Usage: silentUsage}, nil
	}
	finish := func(err error) (*middleware.Response, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		run.completed, run.err = err == nil, err
		if err != nil {
			return nil, err
		}
		return &middleware.Response{Content: strings.Join(beforeSilence, "") + strings.Join(afterSilence, ""),
			FinishReason: executor.FinishStop, Usage: silentUsage}, nil
	}
	for _, t := range beforeSilence {
		if err := emit(executor.Event{Kind: executor.EventText, Text: t}); err != nil {
			return finish(err)
		}
	}
	timer := time.NewTimer(silence)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return finish(fmt.Errorf("the client went away during the silence: %w", ctx.Err()))
	}
	for _, t := range afterSilence {
		if err := emit(executor.Event{Kind: executor.EventText, Text: t}); err != nil {
			return finish(err)
		}
	}
	return finish(nil)
}

func (h *silentHandler) run(chat string) silentRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.runs[chat]; r != nil {
		return *r
	}
	return silentRun{}
}

// wireLog records what the server wrote to each response, by request id:
// the keep-alive comments and the longest pause between two writes.
type wireLog struct {
	mu   sync.Mutex
	byID map[string]*wireStats
}

type wireStats struct {
	keepAlives int
	last       time.Time
	maxGap     time.Duration
}

func (l *wireLog) note(id string, b []byte) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.byID[id]
	if s == nil {
		s = &wireStats{last: now}
		l.byID[id] = s
	}
	s.keepAlives += bytes.Count(b, []byte(": keep-alive")) + bytes.Count(b, []byte(`event: ping`+"\n"+`data: {"type":"ping"}`))
	s.maxGap = max(s.maxGap, now.Sub(s.last))
	s.last = now
}

func (l *wireLog) stats(id string) wireStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.byID[id]; s != nil {
		return *s
	}
	return wireStats{}
}

// wireWriter notes each write of the adapter in a wireLog. Flushes reach
// the real writer through Unwrap (http.ResponseController).
type wireWriter struct {
	http.ResponseWriter
	log *wireLog
}

func (w *wireWriter) Write(b []byte) (int, error) {
	w.log.note(w.Header().Get("x-request-id"), b)
	return w.ResponseWriter.Write(b)
}

func (w *wireWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// matrixClient is one real client: it sends one request for chat (mode
// stream or plain; turns: a quick first turn and the slow one by
// previous_response_id) to the adapter at base (ending in /v1) through
// door, and reports what it got.
type matrixClient struct {
	name string
	door string
	// need names a missing precondition ("" when the client can run).
	need  string
	modes []string
	run   func(ctx context.Context, base, user, mode string) clientResult
}

// The doors' names, and what each reports as its finish.
var finishOf = map[string]string{"chat": "stop", "responses": "completed", "messages": "end_turn"}

// TestRealClientsOverASilentRun is the real-client matrix (issues 15 and
// 36): each client sends a streamed and a non-streamed request through its
// door (Chat Completions, Responses, Messages) to the adapter, whose
// handler answers part of the text, says nothing for 60 s (the stream gets
// the door's keep-alives at the default interval: SSE comments on the
// OpenAI doors, ping events on Messages; the non-streamed request gets
// nothing), then answers the rest with its usage. Every client must get
// the whole text and the usage, in one request. The Responses clients
// also continue a conversation by previous_response_id alone (mode
// turns), the slow turn being the second. All the requests run at once,
// so the test takes about one silence.
func TestRealClientsOverASilentRun(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skipf("-short: the real-client matrix waits through a %v silence", silence)
	}
	nodeDir, needNode := "", ""
	if _, err := exec.LookPath("node"); err == nil || testenv.InCI() {
		var scripts []string
		for _, f := range []string{"openai_client.mjs", "vercel_client.mjs", "responses_client.mjs", "anthropic_client.mjs", "vercel_doors.mjs"} {
			scripts = append(scripts, filepath.Join("testdata", "clients", f))
		}
		nodeDir = testenv.NodePackage(t, "clients", filepath.Join("testdata", "clients"), scripts...)
	} else {
		needNode = "node is not on PATH; install Node.js 18 or later (with npm)"
	}
	goV1Bin := buildGoV1Client(t)
	needCurl := ""
	if _, err := exec.LookPath("curl"); err != nil {
		if testenv.InCI() {
			t.Fatal("CI=true and curl is not on PATH; install curl")
		}
		needCurl = "curl is not on PATH; install curl"
	}

	h := &silentHandler{runs: map[string]*silentRun{}}
	wire := &wireLog{byID: map[string]*wireStats{}}
	s, err := openai.New(openai.Options{Handler: h})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(&wireWriter{ResponseWriter: w, log: wire}, r)
	}))
	t.Cleanup(srv.Close)
	base := srv.URL + "/v1"

	both := []string{"stream", "plain"}
	withTurns := []string{"stream", "plain", "turns"}
	clients := []matrixClient{
		{name: "openai-go-v1", door: "chat", modes: both, run: programClient("", goV1Bin)},
		{name: "openai-go-v3", door: "chat", modes: both, run: goV3Client},
		{name: "openai-node", door: "chat", need: needNode, modes: both, run: programClient(nodeDir, "node", "openai_client.mjs")},
		{name: "vercel-ai", door: "chat", need: needNode, modes: both, run: programClient(nodeDir, "node", "vercel_client.mjs")},
		{name: "curl", door: "chat", need: needCurl, modes: both, run: curlClient},
		{name: "openai-go-v3", door: "responses", modes: withTurns, run: goResponsesClient},
		{name: "openai-node", door: "responses", need: needNode, modes: withTurns, run: programClient(nodeDir, "node", "responses_client.mjs")},
		{name: "vercel-ai", door: "responses", need: needNode, modes: both, run: programClient(nodeDir, "node", "vercel_doors.mjs", "responses")},
		{name: "curl", door: "responses", need: needCurl, modes: both, run: curlDoorClient("responses")},
		{name: "anthropic-sdk-go", door: "messages", modes: both, run: goMessagesClient},
		{name: "anthropic-node", door: "messages", need: needNode, modes: both, run: programClient(nodeDir, "node", "anthropic_client.mjs")},
		{name: "vercel-ai", door: "messages", need: needNode, modes: both, run: programClient(nodeDir, "node", "vercel_doors.mjs", "messages")},
		{name: "curl", door: "messages", need: needCurl, modes: both, run: curlDoorClient("messages")},
	}
	type job struct {
		client     matrixClient
		mode, chat string
		res        clientResult
	}
	var jobs []*job
	for _, c := range clients {
		for _, mode := range c.modes {
			jobs = append(jobs, &job{client: c, mode: mode, chat: c.door + "." + c.name + "." + mode})
		}
	}

	// The clients run at once, not as parallel subtests: -parallel defaults
	// to GOMAXPROCS, which would queue them one silence after another on a
	// small machine.
	ctx, cancel := context.WithTimeout(context.Background(), silence+4*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, j := range jobs {
		if j.client.need != "" {
			continue
		}
		wg.Go(func() {
			user := "alice:" + j.chat
			if j.mode == "turns" {
				// No chat id: the first response names the conversation's chat.
				user = "alice"
			}
			j.res = j.client.run(ctx, base, user, j.mode)
		})
	}
	wg.Wait()
	t.Logf("%d requests over a %v silence took %v in all", len(jobs), silence, time.Since(start).Round(time.Millisecond))

	want := strings.Join(beforeSilence, "") + strings.Join(afterSilence, "")
	prompt := silentUsage.InputTokens + silentUsage.CacheCreationInputTokens + silentUsage.CacheReadInputTokens
	wantUsage := &clientUsage{Prompt: prompt, Completion: silentUsage.OutputTokens, Total: prompt + silentUsage.OutputTokens}
	for _, j := range jobs {
		t.Run(j.chat, func(t *testing.T) {
			if j.client.need != "" {
				if testenv.InCI() {
					t.Fatalf("CI=true and %s", j.client.need)
				}
				t.Skipf("%s (set CI=true to make this a failure)", j.client.need)
			}
			r := j.res
			chat, requests := j.chat, 1
			if j.mode == "turns" {
				require.Len(t, r.IDs, 2, "two responses: %+v", r)
				chat, requests = r.IDs[0], 2
			}
			run := h.run(chat)
			w := wire.stats(run.requestID)
			t.Logf("client: %d text deltas, %d ms from the first to the last; server: %d keep-alives, longest pause between writes %v",
				r.Parts, r.SpreadMs, w.keepAlives, w.maxGap.Round(time.Millisecond))
			require.Empty(t, r.Error, "the client failed; the server's handler ended with: %v", run.err)
			assert.Equal(t, want, r.Text, "the whole answer, both sides of the silence")
			assert.Equal(t, wantUsage, r.Usage)
			finish := finishOf[j.client.door]
			if strings.HasPrefix(j.client.name, "vercel") {
				finish = "stop" // the AI SDK's own vocabulary
			}
			assert.Equal(t, finish, r.Finish)
			assert.Equal(t, requests, run.requests, "one request a turn: the client neither retried nor gave up")
			assert.True(t, run.completed, "the handler answered after the whole silence: %v", run.err)
			stream := j.mode != "plain"
			assert.Equal(t, stream, run.stream)
			if j.mode == "turns" {
				assert.Equal(t, []executor.Message{{Role: "user", Content: quickPrompt}, {Role: "assistant", Content: quickAnswer},
					{Role: "user", Content: "run the slow build"}}, run.messages, "the second turn carried the first by previous_response_id")
			}
			if !stream {
				assert.Zero(t, w.keepAlives, "a non-streamed answer is one JSON body")
				return
			}
			assert.GreaterOrEqual(t, w.keepAlives, 1, "the stream carried keep-alives through the silence")
			assert.GreaterOrEqual(t, r.Parts, 2, "the text came in several deltas")
			// A client that streams sees the first text a whole silence before
			// the last; a machine's load could delay one read by seconds, not
			// by half a minute.
			assert.GreaterOrEqual(t, time.Duration(r.SpreadMs)*time.Millisecond, silence/2,
				"the text before the silence reached the client before the silence ended")
			if j.client.name == "curl" {
				if j.client.door == "chat" {
					assert.True(t, r.Done, "data: [DONE] ends the stream")
				}
				assert.Equal(t, w.keepAlives, r.KeepAlives, "every keep-alive the server wrote reached curl")
			}
		})
	}
}

// goV3Client is openai-go at its current major version, the one in go.mod.
func goV3Client(ctx context.Context, base, user, mode string) clientResult {
	client := sdk.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"))
	p := sdk.ChatCompletionNewParams{
		Model:    "coder",
		Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("run the slow build")},
		User:     sdk.String(user),
	}
	var r clientResult
	if mode == "plain" {
		comp, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		if len(comp.Choices) > 0 {
			r.Text, r.Finish = comp.Choices[0].Message.Content, comp.Choices[0].FinishReason
		}
		r.Usage = &clientUsage{Prompt: comp.Usage.PromptTokens, Completion: comp.Usage.CompletionTokens, Total: comp.Usage.TotalTokens}
		return r
	}
	p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	s := client.Chat.Completions.NewStreaming(ctx, p)
	defer func() { _ = s.Close() }()
	var text strings.Builder
	var first time.Time
	for s.Next() {
		c := s.Current()
		if len(c.Choices) > 0 {
			if d := c.Choices[0].Delta.Content; d != "" {
				text.WriteString(d)
				r.Parts++
				if first.IsZero() {
					first = time.Now()
				}
				r.SpreadMs = time.Since(first).Milliseconds()
			}
			if f := c.Choices[0].FinishReason; f != "" {
				r.Finish = f
			}
		}
		if c.JSON.Usage.Valid() {
			r.Usage = &clientUsage{Prompt: c.Usage.PromptTokens, Completion: c.Usage.CompletionTokens, Total: c.Usage.TotalTokens}
		}
	}
	r.Text = text.String()
	if err := s.Err(); err != nil {
		r.Error = err.Error()
	}
	return r
}

// programClient runs a client program of the matrix in dir: argv plus
// the mode, with BASE_URL and AGENTBOX_USER set; the program prints its
// clientResult as JSON.
func programClient(dir string, argv ...string) func(ctx context.Context, base, user, mode string) clientResult {
	return func(ctx context.Context, base, user, mode string) clientResult {
		cmd := exec.CommandContext(ctx, argv[0], append(slices.Clone(argv[1:]), mode)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "BASE_URL="+base, "AGENTBOX_USER="+user)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		name := strings.Join(argv, " ") + " " + mode
		out, err := cmd.Output()
		if err != nil {
			return clientResult{Error: fmt.Sprintf("%s: %v: %s", name, err, stderr.String())}
		}
		var r clientResult
		if err := json.Unmarshal(out, &r); err != nil {
			return clientResult{Error: fmt.Sprintf("%s printed %q: %v; stderr: %s", name, out, err, stderr.String())}
		}
		return r
	}
}

// buildGoV1Client builds testdata/clients/openai-go-v1, the matrix's
// openai-go v1 client: a module of its own, so that agentbox's go.mod holds
// one openai-go major version while the matrix still runs the frozen v1
// that gateways may still use.
func buildGoV1Client(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "openai-go-v1")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("testdata", "clients", "openai-go-v1")
	// Its own go.mod, whatever workspace or module flags the caller has.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build the openai-go v1 client (it needs its module in the Go module cache or proxy): %s", out)
	return bin
}

// curlClient posts with curl (-N for the stream) and reads the answer
// itself: the SSE events by the specification's rules (data lines joined
// until a blank line, comment lines skipped), then the chunks' JSON.
func curlClient(ctx context.Context, base, user, mode string) clientResult {
	stream := mode == "stream"
	req := map[string]any{
		"model": "coder", "user": user,
		"messages": []map[string]string{{"role": "user", "content": "run the slow build"}},
	}
	if stream {
		req["stream"] = true
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return clientResult{Error: err.Error()}
	}
	args := []string{"-sS", "--fail-with-body", "-H", "Content-Type: application/json", "--data-binary", "@-", base + "/chat/completions"}
	if stream {
		args = append([]string{"-N"}, args...)
	}
	cmd := exec.CommandContext(ctx, "curl", args...)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if !stream {
		out, err := cmd.Output()
		if err != nil {
			return clientResult{Error: fmt.Sprintf("curl: %v: %s %s", err, out, stderr.String())}
		}
		var comp struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
				Total      int64 `json:"total_tokens"`
			}
		}
		if err := json.Unmarshal(out, &comp); err != nil {
			return clientResult{Error: fmt.Sprintf("curl got %q: %v", out, err)}
		}
		var r clientResult
		if len(comp.Choices) > 0 {
			r.Text, r.Finish = comp.Choices[0].Message.Content, comp.Choices[0].FinishReason
		}
		r.Usage = &clientUsage{Prompt: comp.Usage.Prompt, Completion: comp.Usage.Completion, Total: comp.Usage.Total}
		return r
	}

	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return clientResult{Error: err.Error()}
	}
	if err := cmd.Start(); err != nil {
		return clientResult{Error: err.Error()}
	}
	var r clientResult
	var events []string
	var data []string
	var first time.Time
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != nil {
				events = append(events, strings.Join(data, "\n"))
				data = nil
			}
		case strings.HasPrefix(line, ":"):
			r.KeepAlives++
		case strings.HasPrefix(line, "data:"):
			d := strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
			data = append(data, d)
			var c struct {
				Choices []struct {
					Delta struct{ Content string }
				}
			}
			// Timing is taken as each line arrives, not when the event is
			// dispatched, so it measures the wire.
			if json.Unmarshal([]byte(d), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				if first.IsZero() {
					first = time.Now()
				}
				r.SpreadMs = time.Since(first).Milliseconds()
			}
		default:
			r.Error = fmt.Sprintf("curl read a line that is not SSE: %q", line)
		}
	}
	scanErr := sc.Err()
	waitErr := cmd.Wait()
	if data != nil {
		r.Error = fmt.Sprintf("the stream ended inside an event: %q", data)
	}
	switch {
	case scanErr != nil:
		r.Error = "reading curl's output: " + scanErr.Error()
	case waitErr != nil:
		r.Error = fmt.Sprintf("curl: %v: %s", waitErr, stderr.String())
	}
	var text strings.Builder
	for i, ev := range events {
		if ev == "[DONE]" {
			r.Done = i == len(events)-1
			continue
		}
		var c struct {
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage *struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
				Total      int64 `json:"total_tokens"`
			}
			Error json.RawMessage
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			r.Error = fmt.Sprintf("event %d is not JSON: %q: %v", i, ev, err)
			continue
		}
		if c.Error != nil {
			r.Error = "error event: " + string(c.Error)
		}
		if len(c.Choices) > 0 {
			if d := c.Choices[0].Delta.Content; d != "" {
				text.WriteString(d)
				r.Parts++
			}
			if f := c.Choices[0].FinishReason; f != "" {
				r.Finish = f
			}
		}
		if c.Usage != nil {
			r.Usage = &clientUsage{Prompt: c.Usage.Prompt, Completion: c.Usage.Completion, Total: c.Usage.Total}
		}
	}
	r.Text = text.String()
	return r
}
