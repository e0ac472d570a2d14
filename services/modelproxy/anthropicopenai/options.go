package anthropicopenai

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Thinking request styles for Options.ThinkingParam.
const (
	// ThinkingNone drops the CLI's thinking request (the provider reasons
	// or not by model choice, e.g. deepseek-reasoner).
	ThinkingNone = ""
	// ThinkingReasoningEffort sends reasoning_effort low/medium/high from
	// the thinking budget (OpenAI o-series and gpt-5, OpenRouter, Groq).
	ThinkingReasoningEffort = "reasoning_effort"
	// ThinkingEnableThinking sends enable_thinking and thinking_budget
	// (Qwen on DashScope, vLLM/SGLang serving Qwen3).
	ThinkingEnableThinking = "enable_thinking"
)

// Options are one connector's settings: where the provider is and what
// differs between providers.
type Options struct {
	// BaseURL is the provider's OpenAI base URL, up to but excluding
	// /chat/completions, e.g. https://api.deepseek.com/v1.
	BaseURL string
	// APIKey is sent as Authorization: Bearer. When empty, the incoming
	// request's X-Api-Key (the connector key the model proxy swapped in)
	// is used instead.
	APIKey string
	// Model replaces the model the CLI asked for; empty keeps it.
	Model string
	// ReasoningField is the delta/message field the provider streams its
	// reasoning in: "reasoning_content" (DeepSeek, Qwen, Kimi, vLLM before
	// 0.10) or "reasoning" (OpenRouter, Ollama, vLLM 0.10+). It becomes
	// Anthropic thinking blocks. Empty means both are read.
	ReasoningField string
	// ThinkingParam says how to ask for reasoning when the CLI enables
	// thinking: ThinkingNone, ThinkingReasoningEffort or
	// ThinkingEnableThinking.
	ThinkingParam string
	// StreamUsage adds stream_options.include_usage to streamed requests;
	// OpenAI and most vLLM/DeepSeek deployments send no usage without it.
	// Turn it off only for providers that reject the field.
	StreamUsage bool
	// MaxTokensCeiling caps max_tokens (the CLI asks for up to 32000, more
	// than many providers allow); 0 leaves it as the CLI sent it.
	MaxTokensCeiling int64
	// MaxCompletionTokens sends max_completion_tokens instead of
	// max_tokens (required by OpenAI's reasoning models).
	MaxCompletionTokens bool
	// Client is the transport to the provider (http.DefaultTransport when
	// nil).
	Client http.RoundTripper
	// Logger gets one debug line per call and unknown stream events.
	Logger hclog.Logger
}

// Transport translates Anthropic Messages calls to Chat Completions calls.
type Transport struct {
	opts     Options
	endpoint string
	rt       http.RoundTripper
	log      hclog.Logger
}

var _ http.RoundTripper = (*Transport)(nil)

// New validates o and returns a Transport.
func New(o Options) (*Transport, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("anthropicopenai: base URL %q is not an http(s) URL; set the connector's host to the provider's OpenAI base, e.g. https://api.deepseek.com/v1", o.BaseURL)
	}
	switch o.ThinkingParam {
	case ThinkingNone, ThinkingReasoningEffort, ThinkingEnableThinking:
	default:
		return nil, fmt.Errorf("anthropicopenai: thinking param %q is unknown; use %q, %q or leave it empty", o.ThinkingParam, ThinkingReasoningEffort, ThinkingEnableThinking)
	}
	if o.MaxTokensCeiling < 0 {
		return nil, errors.New("anthropicopenai: max-tokens ceiling is negative; use 0 for none or the provider's output limit")
	}
	if o.Client == nil {
		o.Client = http.DefaultTransport
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return &Transport{opts: o, endpoint: strings.TrimSuffix(o.BaseURL, "/") + "/chat/completions", rt: o.Client, log: o.Logger}, nil
}
