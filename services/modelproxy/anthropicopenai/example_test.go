package anthropicopenai_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
)

// ExampleNew puts the Transport under an http.Client (the model proxy's
// upstream client): the CLI's Anthropic call goes to a Chat Completions
// provider and comes back as an Anthropic message.
func ExampleNew() {
	provider := scriptedopenai.Start(scriptedopenai.WithTurns(scriptedopenai.Say("2")))
	defer provider.Close()
	tr, err := anthropicopenai.New(anthropicopenai.Options{
		BaseURL: provider.URL, APIKey: "sk-provider", Model: "deepseek-chat",
		ReasoningField: "reasoning_content", StreamUsage: true, MaxTokensCeiling: 8192,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := &http.Client{Transport: tr}
	resp, err := c.Post("http://anthropic.invalid/v1/messages", "application/json",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":32000,"messages":[{"role":"user","content":"1+1?"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(b), `"text":"2"`), strings.Contains(string(b), `"stop_reason":"end_turn"`))
	sent := provider.Requests()[0].Body
	fmt.Println(sent.Model, sent.MaxTokens)
	// Output:
	// 200 true true
	// deepseek-chat 8192
}

// ExampleToChatCompletions shows the request half alone.
func ExampleToChatCompletions() {
	body, stream, err := anthropicopenai.ToChatCompletions([]byte(`{"model":"m","max_tokens":100,"stream":true,
		"system":"be brief","messages":[{"role":"user","content":"hi"}]}`), anthropicopenai.Options{StreamUsage: true})
	fmt.Println(string(body), stream, err)
	// Output: {"messages":[{"content":"be brief","role":"system"},{"content":"hi","role":"user"}],"model":"m","max_tokens":100,"stream_options":{"include_usage":true},"stream":true} true <nil>
}
