package openairesponses

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Reasoning request styles for ChatOptions.ThinkingParam.
const (
	// ThinkingNone drops the CLI's reasoning effort.
	ThinkingNone = ""
	// ThinkingReasoningEffort sends reasoning_effort as the CLI asked
	// (OpenAI's reasoning models, OpenRouter, Groq).
	ThinkingReasoningEffort = "reasoning_effort"
	// ThinkingEnableThinking sends enable_thinking (Qwen on DashScope,
	// vLLM/SGLang serving Qwen3).
	ThinkingEnableThinking = "enable_thinking"
)

// ChatOptions are an OpenAI-compatible Chat Completions connector's
// settings.
type ChatOptions struct {
	// BaseURL is the provider's OpenAI base URL, up to but excluding
	// /chat/completions, e.g. https://api.deepseek.com/v1.
	BaseURL string
	// APIKey is sent as Authorization: Bearer. When empty, the incoming
	// request's bearer token (the key the model proxy swapped in) is used.
	APIKey string
	// Model replaces the model of the request; empty keeps it.
	Model string
	// ReasoningField is the field the provider streams reasoning in
	// ("reasoning_content" or "reasoning"; empty reads both); it becomes
	// reasoning summaries.
	ReasoningField string
	// ThinkingParam says how the CLI's reasoning effort is asked for.
	ThinkingParam string
	// StreamUsage adds stream_options.include_usage to streamed requests.
	StreamUsage bool
	// MaxTokensCeiling caps max_tokens; 0 leaves the request's.
	MaxTokensCeiling int64
	// MaxCompletionTokens sends max_completion_tokens instead of
	// max_tokens.
	MaxCompletionTokens bool
	// Client is the transport to the provider (http.DefaultTransport when
	// nil).
	Client http.RoundTripper
	// Logger gets one debug line per call.
	Logger hclog.Logger
}

// MessagesOptions are an Anthropic Messages connector's settings.
type MessagesOptions struct {
	// BaseURL is the API's base URL, up to but excluding /v1/messages,
	// e.g. https://api.anthropic.com.
	BaseURL string
	// APIKey is sent as x-api-key. When empty, the incoming request's
	// bearer token (the key the model proxy swapped in) is used.
	APIKey string
	// Model replaces the model of the request; empty keeps it.
	Model string
	// MaxTokensCeiling caps max_tokens; 0 leaves the request's.
	MaxTokensCeiling int64
	// Client is the transport to the API (http.DefaultTransport when
	// nil).
	Client http.RoundTripper
	// Logger gets one debug line per call.
	Logger hclog.Logger
}

// checkBase validates a base URL.
func checkBase(base, example string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("openairesponses: base URL %q is not an http(s) URL; set the connector's host, e.g. %s", base, example)
	}
	return nil
}

// NewChat returns a Transport that answers Responses API calls from a
// Chat Completions provider.
func NewChat(o ChatOptions) (*Transport, error) {
	if err := checkBase(o.BaseURL, "https://api.openai.com/v1"); err != nil {
		return nil, err
	}
	switch o.ThinkingParam {
	case ThinkingNone, ThinkingReasoningEffort, ThinkingEnableThinking:
	default:
		return nil, fmt.Errorf("openairesponses: thinking param %q is unknown; use %q, %q or leave it empty", o.ThinkingParam, ThinkingReasoningEffort, ThinkingEnableThinking)
	}
	if o.MaxTokensCeiling < 0 {
		return nil, errors.New("openairesponses: max-tokens ceiling is negative; use 0 for none or the provider's output limit")
	}
	return newTransport(chatDialect{o}, strings.TrimSuffix(o.BaseURL, "/")+"/chat/completions", o.Client, o.Logger), nil
}

// NewMessages returns a Transport that answers Responses API calls from
// Anthropic's Messages API.
func NewMessages(o MessagesOptions) (*Transport, error) {
	if err := checkBase(o.BaseURL, "https://api.anthropic.com"); err != nil {
		return nil, err
	}
	if o.MaxTokensCeiling < 0 {
		return nil, errors.New("openairesponses: max-tokens ceiling is negative; use 0 for none or the model's output limit")
	}
	return newTransport(messagesDialect{o}, strings.TrimSuffix(o.BaseURL, "/")+"/v1/messages", o.Client, o.Logger), nil
}
