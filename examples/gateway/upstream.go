package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go"
	ooption "github.com/openai/openai-go/option"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// defaultMaxTokens is the Anthropic max_tokens when the client sets none
// (the Messages API requires one).
const defaultMaxTokens = 4096

// direct is the gateway's own next handler: it answers a plain assistant
// (no sandbox block) by calling its connector directly, Anthropic's
// Messages API or an OpenAI-compatible chat completions API, streaming
// the text as events. The conversation goes upstream as the client sent
// it, after the assistant's prompts.yml messages.
type direct struct {
	assistants map[string]*config.Assistant
}

var _ middleware.Handler = (*direct)(nil)

// Handle implements middleware.Handler.
func (d *direct) Handle(ctx context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
	a := d.assistants[req.AssistantID]
	if a == nil {
		return middleware.UnknownAssistant.Handle(ctx, req, emit)
	}
	c := a.Connector
	if c == nil {
		return nil, middleware.Errorf(middleware.KindConfig, nil, "assistant %q has no connector; set \"connector\" in %s", a.ID, a.File)
	}
	switch c.Type {
	case config.ConnectorAnthropic:
		return d.anthropic(ctx, a, req, emit)
	case config.ConnectorOpenAI:
		return d.openai(ctx, a, req, emit)
	}
	return nil, middleware.Errorf(middleware.KindConfig, nil,
		"assistant %q: connector %q has type %q, which only a sandboxed assistant can use; give it an anthropic or openai connector", a.ID, c.ID, c.Type)
}

// conversation is the assistant's prompts followed by the client's
// messages; system messages are gathered separately, in order.
func conversation(a *config.Assistant, msgs []executor.Message) (system []string, turns []executor.Message) {
	for _, p := range a.Prompts {
		if p.Role == "system" {
			system = append(system, strings.TrimSpace(p.Content))
		} else {
			turns = append(turns, executor.Message{Role: p.Role, Content: p.Content})
		}
	}
	for _, m := range msgs {
		if m.Role == "system" {
			system = append(system, m.Content)
		} else {
			turns = append(turns, m)
		}
	}
	return system, turns
}

// maxTokens reads the client's max_completion_tokens or max_tokens.
func maxTokens(opts map[string]any) (int64, bool) {
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if f, ok := opts[k].(float64); ok && f > 0 {
			return int64(f), true
		}
	}
	return 0, false
}

// upstreamError is a failed upstream call as the client should see it.
func upstreamError(ctx context.Context, c *config.Connector, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return middleware.Errorf(middleware.KindCanceled, err, "the client went away during the upstream call")
	}
	return middleware.Errorf(middleware.KindAgent, err, "connector %q (%s): %v", c.ID, c.Host, err)
}

// anthropic streams one Messages API call.
func (d *direct) anthropic(ctx context.Context, a *config.Assistant, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
	c := a.Connector
	client := anthropic.NewClient(aoption.WithBaseURL(c.Host), aoption.WithAPIKey(c.Key.Reveal()), aoption.WithMaxRetries(1))
	system, turns := conversation(a, req.Messages)
	p := anthropic.MessageNewParams{Model: c.Model, MaxTokens: defaultMaxTokens}
	if n, ok := maxTokens(req.Options); ok {
		p.MaxTokens = n
	}
	if t, ok := req.Options["temperature"].(float64); ok {
		p.Temperature = anthropic.Float(t)
	}
	for _, s := range system {
		p.System = append(p.System, anthropic.TextBlockParam{Text: s})
	}
	for _, m := range turns {
		block := anthropic.NewTextBlock(m.Content)
		if m.Role == "assistant" {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(block))
		} else {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(block))
		}
	}
	stream := client.Messages.NewStreaming(ctx, p)
	defer func() { _ = stream.Close() }()
	var msg anthropic.Message
	var content strings.Builder
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, upstreamError(ctx, c, err)
		}
		if delta, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
			if t, ok := delta.Delta.AsAny().(anthropic.TextDelta); ok && t.Text != "" {
				content.WriteString(t.Text)
				if err := emit(executor.Event{Kind: executor.EventText, Text: t.Text}); err != nil {
					return nil, middleware.Errorf(middleware.KindCanceled, err, "the client went away")
				}
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, upstreamError(ctx, c, err)
	}
	finish := executor.FinishStop
	if msg.StopReason == anthropic.StopReasonMaxTokens {
		finish = executor.FinishMaxTurns
	}
	return &middleware.Response{
		Content:      content.String(),
		FinishReason: finish,
		Usage: executor.Usage{
			InputTokens:              msg.Usage.InputTokens,
			OutputTokens:             msg.Usage.OutputTokens,
			CacheCreationInputTokens: msg.Usage.CacheCreationInputTokens,
			CacheReadInputTokens:     msg.Usage.CacheReadInputTokens,
		},
	}, nil
}

// openai streams one chat completions call to an OpenAI-compatible API.
func (d *direct) openai(ctx context.Context, a *config.Assistant, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
	c := a.Connector
	client := openai.NewClient(ooption.WithBaseURL(strings.TrimSuffix(c.Host, "/")+"/"), ooption.WithAPIKey(c.Key.Reveal()), ooption.WithMaxRetries(1))
	system, turns := conversation(a, req.Messages)
	p := openai.ChatCompletionNewParams{
		Model:         c.Model,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if n, ok := maxTokens(req.Options); ok {
		p.MaxCompletionTokens = openai.Int(n)
	}
	if t, ok := req.Options["temperature"].(float64); ok {
		p.Temperature = openai.Float(t)
	}
	if len(system) > 0 {
		p.Messages = append(p.Messages, openai.SystemMessage(strings.Join(system, "\n\n")))
	}
	for _, m := range turns {
		if m.Role == "assistant" {
			p.Messages = append(p.Messages, openai.AssistantMessage(m.Content))
		} else {
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		}
	}
	stream := client.Chat.Completions.NewStreaming(ctx, p)
	defer func() { _ = stream.Close() }()
	resp := &middleware.Response{FinishReason: executor.FinishStop}
	var content strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			resp.Usage = executor.Usage{
				InputTokens:          chunk.Usage.PromptTokens,
				OutputTokens:         chunk.Usage.CompletionTokens,
				CacheReadInputTokens: chunk.Usage.PromptTokensDetails.CachedTokens,
			}
		}
		for _, ch := range chunk.Choices {
			if ch.FinishReason != "" {
				resp.FinishReason = ch.FinishReason
			}
			if t := ch.Delta.Content; t != "" {
				content.WriteString(t)
				if err := emit(executor.Event{Kind: executor.EventText, Text: t}); err != nil {
					return nil, middleware.Errorf(middleware.KindCanceled, err, "the client went away")
				}
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, upstreamError(ctx, c, err)
	}
	resp.Content = content.String()
	return resp, nil
}

// describe names a connector for log lines.
func describe(c *config.Connector) string {
	return fmt.Sprintf("%s (%s %s, model %s)", c.ID, c.Type, c.Host, c.Model)
}
