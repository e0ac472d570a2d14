package anthropicopenai

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequestGolden(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		body string
	}{
		{name: "basic", opts: Options{StreamUsage: true, MaxTokensCeiling: 8192}, body: `{
			"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"temperature":0.2,"top_p":0.9,"top_k":5,
			"stop_sequences":["END"],"metadata":{"user_id":"u"},
			"system":[{"type":"text","text":"You are Claude Code."},{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
			"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},
				{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two","cache_control":{"type":"ephemeral"}}]}]}`},
		{name: "tools", opts: Options{Model: "deepseek-chat"}, body: `{
			"model":"claude-sonnet-4-5","max_tokens":1000,
			"tool_choice":{"type":"any","disable_parallel_tool_use":true},
			"tools":[{"name":"Bash","description":"Run a command","input_schema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}},
				{"name":"NoArgs","input_schema":{"type":"object"}},
				{"type":"web_search_20250305","name":"web_search","max_uses":1}],
			"messages":[{"role":"user","content":"run it"}]}`},
		{name: "tool_choice_named", body: `{"model":"m","max_tokens":10,"tool_choice":{"type":"tool","name":"Bash"},
			"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`},
		{name: "tool_round_trip", body: `{"model":"m","max_tokens":100,"messages":[
			{"role":"user","content":"make files"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"sig"},{"type":"text","text":"Doing it."},
				{"type":"tool_use","id":"toolu_1","name":"Write","input":{"file_path":"/w/ü.txt","content":"héllo 世界 ✓\n"}},
				{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"false"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"File created"},
				{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"exit status 1"}]},
				{"type":"text","text":"continue"}]}]}`},
		{name: "images", body: `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":[
			{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
			{"type":"text","text":"what is this?"},
			{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}]}`},
		{name: "thinking_effort", opts: Options{ThinkingParam: ThinkingReasoningEffort, MaxCompletionTokens: true},
			body: `{"model":"m","max_tokens":20000,"thinking":{"type":"enabled","budget_tokens":10000},"messages":[{"role":"user","content":"think"}]}`},
		{name: "thinking_qwen", opts: Options{ThinkingParam: ThinkingEnableThinking, StreamUsage: true},
			body: `{"model":"m","max_tokens":20000,"stream":true,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"think"}]}`},
		{name: "cli_2_1_197_shape", opts: Options{ThinkingParam: ThinkingReasoningEffort},
			body: `{"model":"claude-opus-4-8","max_tokens":64000,"stream":true,"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},
			"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
			"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.7c8; cc_entrypoint=sdk-cli;"},{"type":"text","text":"You are a Claude agent.","cache_control":{"type":"ephemeral"}}],
			"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>date</system-reminder>"},{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]},
				{"role":"system","content":"Available agent types: claude"}]}`},
		{name: "thinking_dropped", body: `{"model":"m","max_tokens":200,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"think"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, stream, err := ToChatCompletions([]byte(tc.body), tc.opts)
			require.NoError(t, err)
			var probe struct {
				Stream bool `json:"stream"`
			}
			require.NoError(t, json.Unmarshal([]byte(tc.body), &probe))
			assert.Equal(t, probe.Stream, stream)
			golden(t, "request/"+tc.name+".json", indent(t, out))
		})
	}
}

func TestRequestInvariants(t *testing.T) {
	out, _, err := ToChatCompletions([]byte(`{"model":"m","max_tokens":100,"messages":[
		{"role":"user","content":"a"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"X","input":{"q":"ü"}},{"type":"tool_use","id":"t2","name":"Y","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"y"},{"type":"tool_result","tool_use_id":"t1","content":"x"},{"type":"text","text":"go on"}]}]}`), Options{})
	require.NoError(t, err)
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string
				Function struct{ Arguments string }
			} `json:"tool_calls"`
		}
	}
	require.NoError(t, json.Unmarshal(out, &req))
	var roles []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	assert.Equal(t, []string{"user", "assistant", "tool", "tool", "user"}, roles, "tool messages follow the assistant's tool_calls directly, before the user's text")
	assert.Equal(t, "t2", req.Messages[2].ToolCallID)
	var args map[string]string
	require.NoError(t, json.Unmarshal([]byte(req.Messages[1].ToolCalls[0].Function.Arguments), &args))
	assert.Equal(t, "ü", args["q"])
}

func TestRequestBad(t *testing.T) {
	for name, body := range map[string]string{
		"not json":      `{"model":`,
		"content int":   `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}`,
		"messages obj":  `{"model":"m","max_tokens":1,"messages":{}}`,
		"array at root": `[1,2]`,
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := ToChatCompletions([]byte(body), Options{})
			assert.Error(t, err)
		})
	}
}

func TestNewValidates(t *testing.T) {
	_, err := New(Options{BaseURL: "ftp://x"})
	assert.ErrorContains(t, err, "https://api.deepseek.com/v1")
	_, err = New(Options{BaseURL: "http://x", ThinkingParam: "bogus"})
	assert.ErrorContains(t, err, "bogus")
	_, err = New(Options{BaseURL: "http://x", MaxTokensCeiling: -1})
	assert.Error(t, err)
}
