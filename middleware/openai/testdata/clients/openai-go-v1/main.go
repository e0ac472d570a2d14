// Command openai-go-v1 is one request of middleware/openai's client matrix
// (clients_test.go) with openai-go v1, the frozen major version many Go
// gateways still run. It is its own module so that agentbox's go.mod holds
// one openai-go major version (v3) while the matrix keeps this real client.
// Usage: openai-go-v1 stream|plain, with BASE_URL (the adapter's /v1) and
// AGENTBOX_USER ("<user>:<chat>") set. It prints one JSON object of
// observations; the Go test asserts on them.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	sdk "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// usage is the usage as every client of the matrix reports it.
type usage struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
	Total      int64 `json:"total"`
}

// result is the matrix's JSON contract (clientResult in clients_test.go).
type result struct {
	Text     string `json:"text"`
	Usage    *usage `json:"usage"`
	Finish   string `json:"finish"`
	Parts    int    `json:"parts"`
	SpreadMs int64  `json:"spreadMs"`
	Error    string `json:"error"`
}

// main prints the result of one request; a failed request is the result's
// error, not an exit status, so the test reports what the client saw.
func main() {
	var r result
	switch mode := strings.Join(os.Args[1:], " "); mode {
	case "stream", "plain":
		r = run(context.Background(), os.Getenv("BASE_URL"), os.Getenv("AGENTBOX_USER"), mode == "stream")
	default:
		r.Error = fmt.Sprintf("unknown mode %q; use stream or plain", mode)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run sends one chat completion request, streamed or not, to the adapter at
// base and reports what came back.
func run(ctx context.Context, base, user string, stream bool) result {
	client := sdk.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"))
	p := sdk.ChatCompletionNewParams{
		Model:    "coder",
		Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("run the slow build")},
		User:     sdk.String(user),
	}
	var r result
	if !stream {
		comp, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		if len(comp.Choices) > 0 {
			r.Text, r.Finish = comp.Choices[0].Message.Content, comp.Choices[0].FinishReason
		}
		r.Usage = &usage{Prompt: comp.Usage.PromptTokens, Completion: comp.Usage.CompletionTokens, Total: comp.Usage.TotalTokens}
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
			r.Usage = &usage{Prompt: c.Usage.PromptTokens, Completion: c.Usage.CompletionTokens, Total: c.Usage.TotalTokens}
		}
	}
	r.Text = text.String()
	if err := s.Err(); err != nil {
		r.Error = err.Error()
	}
	return r
}
