package openai

import (
	"encoding/json"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// chatRequest is the part of a chat completion request the adapter reads;
// every other field is passed on in middleware.Request.Options. It is
// decoded with json v2 (strictjson.Object.Into): names match exactly.
type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options"`
	User          string         `json:"user"`
	N             *int           `json:"n"`
	// Sandbox names the client sandbox (an extension; HeaderSandbox).
	Sandbox string `json:"sandbox"`
}

// knownFields are the request fields the adapter consumes itself: the
// body's reading refuses a member that folds to one of them without being
// it (reading.go).
var knownFields = []string{"model", "messages", "stream", "stream_options", "user", "n", "sandbox"}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one input message; Content is a string, null, or an array
// of content parts.
type chatMessage struct {
	Role    string         `json:"role"`
	Content jsontext.Value `json:"content"`
}

// contentPart is one element of an array content.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// completion is a non-streamed answer (object "chat.completion").
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
	// Agentbox is the extension (see the package documentation).
	Agentbox *extension `json:"agentbox,omitempty"`
}

type completionChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     *struct{}       `json:"logprobs"`
}

type responseMessage struct {
	Role    string    `json:"role"`
	Content string    `json:"content"`
	Refusal *struct{} `json:"refusal"`
}

// chunk is one streamed event (object "chat.completion.chunk").
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
	// Agentbox is the extension (see the package documentation).
	Agentbox *extension `json:"agentbox,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// usage is OpenAI's usage object. prompt_tokens counts every input token,
// cached or not, as OpenAI does; the cached share is in
// prompt_tokens_details.cached_tokens.
type usage struct {
	PromptTokens        int64          `json:"prompt_tokens"`
	CompletionTokens    int64          `json:"completion_tokens"`
	TotalTokens         int64          `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

func usageOf(u executor.Usage) *usage {
	prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	return &usage{
		PromptTokens:        prompt,
		CompletionTokens:    u.OutputTokens,
		TotalTokens:         prompt + u.OutputTokens,
		PromptTokensDetails: &promptDetails{CachedTokens: u.CacheReadInputTokens},
	}
}

// extension is the "agentbox" object of chunks and completions: an
// executor.Event's fields, plus the adapter's own kinds and flags.
type extension struct {
	Kind       string                `json:"kind"`
	Text       string                `json:"text,omitempty"`
	Init       *executor.InitInfo    `json:"init,omitempty"`
	Tool       *executor.ToolUse     `json:"tool,omitempty"`
	ToolResult *executor.ToolResult  `json:"tool_result,omitempty"`
	UI         *executor.UIMessage   `json:"ui,omitempty"`
	Queue      *executor.QueueInfo   `json:"queue,omitempty"`
	Sandbox    *executor.SandboxInfo `json:"sandbox,omitempty"`
	Truncated  bool                  `json:"truncated,omitempty"`
	Timings    *timings              `json:"timings,omitempty"`
	Usage      *executor.Usage       `json:"usage,omitempty"`
}

// Kinds of the extension besides executor's event kinds.
const (
	// kindReset: discard the content streamed so far; the content that
	// follows replaces it (a Next hook replaced the answer).
	kindReset = "reset"
	// kindDone: the run is complete; carries timings and the agent CLI's
	// own usage report.
	kindDone = "done"
)

func extensionOf(ev executor.Event) *extension {
	return &extension{Kind: string(ev.Kind), Text: ev.Text, Init: ev.Init, Tool: ev.Tool, ToolResult: ev.ToolResult, UI: ev.UI, Queue: ev.Queue, Sandbox: ev.Sandbox}
}

// timings are middleware.Timings in milliseconds.
type timings struct {
	Lease          float64 `json:"lease_ms"`
	Queue          float64 `json:"queue_ms"`
	ContainerStart float64 `json:"container_start_ms"`
	Workspace      float64 `json:"workspace_ms"`
	CreateHook     float64 `json:"create_hook_ms"`
	Agent          float64 `json:"agent_ms"`
	NextHook       float64 `json:"next_hook_ms"`
	Teardown       float64 `json:"teardown_ms"`
	Total          float64 `json:"total_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// doneExtension is the extension of the final chunk and of a completion;
// nil for a response without a sandbox run.
func doneExtension(resp *middleware.Response) *extension {
	if resp.Timings.Total == 0 {
		return nil
	}
	t := resp.Timings
	ext := &extension{Kind: kindDone, Timings: &timings{
		Lease: ms(t.Lease), Queue: ms(t.Queue), ContainerStart: ms(t.ContainerStart), Workspace: ms(t.Workspace),
		CreateHook: ms(t.CreateHook), Agent: ms(t.Agent), NextHook: ms(t.NextHook),
		Teardown: ms(t.Teardown), Total: ms(t.Total),
	}}
	if resp.Completion != nil {
		u := resp.Completion.Usage
		ext.Usage = &u
	}
	return ext
}

// errorBody is OpenAI's error JSON.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// modelList is the answer of GET /v1/models.
type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

// mergedList is modelList with the next handler's entries kept as they
// are.
type mergedList struct {
	Object string            `json:"object"`
	Data   []json.RawMessage `json:"data"`
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Name is the assistant's human-readable name (an extension).
	Name string `json:"name,omitempty"`
	// Sandbox reports that the assistant runs an agent in a sandbox (an
	// extension).
	Sandbox bool `json:"sandbox"`
	// Environment is what the assistant's agent finds in its sandbox
	// (GET /v1/models/{id} only; an extension).
	Environment *executor.Environment `json:"environment,omitempty"`
}
