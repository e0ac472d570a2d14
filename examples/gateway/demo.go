package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
)

// Demo request parameters.
const (
	demoUser      = "demo"
	demoAssistant = "coder"
	// demoCodex is the second sandboxed assistant the demo asks, which
	// runs the Codex CLI.
	demoCodex  = "codex"
	demoPrompt = "Write hello.txt in the workspace, then show me its content with cat."
)

// demoAssistants are the assistants -demo asks, in order, when no
// -demo-assistant names one: those of them the gateway directory has.
var demoAssistants = []string{demoAssistant, demoCodex}

// extension is the agentbox object of a streamed chunk (see
// middleware/openai's doc).
type extension struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	Tool *struct {
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"tool"`
	ToolResult *struct {
		Content string `json:"content"`
		IsError bool   `json:"is_error"`
	} `json:"tool_result"`
	UI *struct {
		Action string         `json:"action"`
		Type   string         `json:"type"`
		Props  map[string]any `json:"props"`
	} `json:"ui"`
	// Sandbox is a client sandbox's lifecycle event (kind "sandbox").
	Sandbox *struct {
		ID       string `json:"sandbox_id"`
		Path     string `json:"path"`
		Command  string `json:"command"`
		ExitCode *int   `json:"exit_code"`
	} `json:"sandbox"`
	Timings map[string]float64 `json:"timings"`
}

// demoResult is what one demo request produced.
type demoResult struct {
	Chat     string
	Content  string
	Usage    sdk.CompletionUsage
	Finish   string
	File     string // the workspace path of the file the agent wrote
	FileData []byte
}

// runDemo sends the demo request to each of assistants in turn (a chat of
// its own each), printing its answer as runDemoOne does.
func runDemo(ctx context.Context, g *Gateway, o Options, assistants []string, out io.Writer) error {
	for i, a := range assistants {
		ca := g.Config.Assistants[a]
		if ca == nil || ca.Sandbox == nil {
			return fmt.Errorf("demo: %q is not a sandboxed assistant of %s; name one with -demo-assistant", a, o.Dir)
		}
		if i > 0 {
			_, _ = fmt.Fprintf(out, "\n----\n\n")
		}
		if err := runDemoOne(ctx, g, o, a, out); err != nil {
			return fmt.Errorf("demo of %s (%s): %w", a, ca.Sandbox.Command, err)
		}
	}
	return nil
}

// demoTargets are the assistants -demo asks: the one named, or those of
// demoAssistants the directory has.
func demoTargets(cfg *config.Gateway, named string) []string {
	if named != "" {
		return []string{named}
	}
	var out []string
	for _, a := range demoAssistants {
		if ca := cfg.Assistants[a]; ca != nil && ca.Sandbox != nil {
			out = append(out, a)
		}
	}
	return out
}

// runDemoOne sends one streamed chat request for assistant through the
// official OpenAI Go SDK, printing the text, the tool activity and the hook
// messages as they arrive, then the usage and the file the agent wrote in
// the chat's workspace on the host.
func runDemoOne(ctx context.Context, g *Gateway, o Options, assistant string, out io.Writer) error {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(out, format, args...) }
	chat := fmt.Sprintf("demo-%s-%d", assistant, time.Now().Unix())
	p("POST %s/v1/chat/completions  model=%s user=%s chat=%s stream=true\n> %s\n\n", g.URL, assistant, demoUser, chat, demoPrompt)
	res, err := assistantRequest(ctx, newClient(g.URL, demoUser, chat), assistant, chat, demoPrompt, func(ext extension, text string) {
		switch {
		case text != "":
			p("%s", text)
		case ext.Kind == "tool_use" && ext.Tool != nil:
			p("\n[tool] %s %s\n", ext.Tool.Name, ext.Tool.Input)
		case ext.Kind == "tool_result" && ext.ToolResult != nil:
			p("[tool result] %s\n", strings.TrimSpace(ext.ToolResult.Content))
		case ext.Kind == "ui" && ext.UI != nil && ext.UI.Action != "end":
			p("[hook %s %s] %v\n", ext.UI.Action, ext.UI.Type, ext.UI.Props)
		case ext.Kind == "sandbox":
			p("[sandbox] %s\n", ext.Text)
		case ext.Kind == "done" && ext.Timings != nil:
			p("\n[timings ms] container_start=%.0f create_hook=%.1f agent=%.0f next_hook=%.1f teardown=%.0f total=%.0f\n",
				ext.Timings["container_start_ms"], ext.Timings["create_hook_ms"], ext.Timings["agent_ms"],
				ext.Timings["next_hook_ms"], ext.Timings["teardown_ms"], ext.Timings["total_ms"])
		}
	})
	if err != nil {
		return fmt.Errorf("demo request: %w", err)
	}
	p("\nfinish_reason: %s\nusage: prompt_tokens=%d completion_tokens=%d total_tokens=%d\n",
		res.Finish, res.Usage.PromptTokens, res.Usage.CompletionTokens, res.Usage.TotalTokens)
	if o.Executor == config.ExecutorKubernetes {
		if g.Model == nil {
			p("\n(real model: the file it wrote, if any, is in the chat's workspace claim)\n")
			return nil
		}
		data, err := readPodWorkspace(ctx, g, o, assistant, chat, scriptedapi.DemoFile)
		if err != nil {
			return fmt.Errorf("the scripted agent should have written %s: %w", scriptedapi.DemoFile, err)
		}
		p("\n%s (read through a new pod on the chat's workspace claim, after the first pod is gone):\n%s", scriptedapi.DemoFile, data)
		return nil
	}
	wsDir, err := executor.WorkspaceDir(o.DataDir, demoUser, chat)
	if err != nil {
		return fmt.Errorf("demo request: %w", err)
	}
	res.File = filepath.Join(wsDir, scriptedapi.DemoFile)
	if g.Model == nil {
		p("\n(real model: the file it wrote, if any, is under %s)\n", filepath.Dir(res.File))
		return nil
	}
	data, err := os.ReadFile(res.File)
	if err != nil {
		return fmt.Errorf("the scripted agent should have written %s: %w", res.File, err)
	}
	p("\n%s (on the host, after the container is gone):\n%s", res.File, data)
	return nil
}

// newClient is an OpenAI SDK client of the gateway at url for one user's
// chat (X-Agentbox-User and X-Agentbox-Chat), with no retries. It sends
// through http.DefaultClient: the SDK's default gives every client a
// transport (and keep-alive pool) of its own, which a client per request
// would leave behind idle after each request.
func newClient(url, user, chat string, more ...option.RequestOption) sdk.Client {
	return sdk.NewClient(append([]option.RequestOption{option.WithBaseURL(url + "/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHTTPClient(http.DefaultClient),
		option.WithHeader("X-Agentbox-User", user), option.WithHeader("X-Agentbox-Chat", chat)}, more...)...)
}

// demoRequest streams one chat completion of the demo assistant for chat,
// calling on for every text delta (text) and every agentbox extension
// object (ext), and returns the accumulated result.
func demoRequest(ctx context.Context, url, chat, prompt string, on func(ext extension, text string)) (*demoResult, error) {
	return chatRequest(ctx, newClient(url, demoUser, chat), chat, prompt, on)
}

// chatRequest is demoRequest with a client of any user.
func chatRequest(ctx context.Context, client sdk.Client, chat, prompt string, on func(ext extension, text string)) (*demoResult, error) {
	return assistantRequest(ctx, client, demoAssistant, chat, prompt, on)
}

// assistantRequest is chatRequest for any assistant.
func assistantRequest(ctx context.Context, client sdk.Client, assistant, chat, prompt string, on func(ext extension, text string)) (*demoResult, error) {
	stream := client.Chat.Completions.NewStreaming(ctx, sdk.ChatCompletionNewParams{
		Model:         assistant,
		Messages:      []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(prompt)},
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	})
	defer func() { _ = stream.Close() }()
	res := &demoResult{Chat: chat}
	var content strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		if f, ok := chunk.JSON.ExtraFields["agentbox"]; ok && f.Raw() != "" {
			var ext extension
			if err := json.Unmarshal([]byte(f.Raw()), &ext); err != nil {
				return nil, fmt.Errorf("agentbox extension %s: %w", f.Raw(), err)
			}
			on(ext, "")
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				content.WriteString(ch.Delta.Content)
				on(extension{}, ch.Delta.Content)
			}
			if ch.FinishReason != "" {
				res.Finish = ch.FinishReason
			}
		}
		if chunk.JSON.Usage.Valid() {
			res.Usage = chunk.Usage
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	res.Content = content.String()
	if res.Finish != executor.FinishStop {
		return res, fmt.Errorf("finish_reason %q, want %q", res.Finish, executor.FinishStop)
	}
	return res, nil
}

// readPodWorkspace reads a file of the demo chat's workspace on the
// kubernetes executor: through a pod of the assistant's image on the
// chat's claim (the pod of the request is gone by then), from an executor
// of its own.
func readPodWorkspace(ctx context.Context, g *Gateway, o Options, assistant, chat, name string) ([]byte, error) {
	a, err := g.catalog.Lookup(ctx, assistant)
	if err != nil {
		return nil, err
	}
	ko := o.Kubernetes
	ko.InstanceID, ko.Logger, ko.ReconcileInterval = "", nil, -1
	e, err := kubernetes.New(ctx, ko)
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.Close() }()
	sb, err := e.Create(ctx, executor.Spec{UserID: demoUser, ChatID: chat, Image: a.Sandbox.Spec.Image, LeaseWait: time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() { _ = sb.Close(context.WithoutCancel(ctx)) }()
	return sb.ReadFile(ctx, name)
}
