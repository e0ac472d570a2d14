package anthropicopenai_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
)

// cliSizedRequest is a streamed request the size of a Claude Code call
// mid-task: a 30 KB system prompt, 20 tools, 30 turns with tool calls.
func cliSizedRequest() string {
	var tools []map[string]any
	for i := range 20 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("Tool%d", i), "description": strings.Repeat("describes the tool. ", 30),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{
				"command": map[string]string{"type": "string", "description": strings.Repeat("the command. ", 10)},
				"timeout": map[string]string{"type": "number"}}, "required": []string{"command"}}})
	}
	msgs := []map[string]any{{"role": "user", "content": "start the task"}}
	for i := range 15 {
		id := fmt.Sprintf("toolu_%02d", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []map[string]any{{"type": "text", "text": "Next step."},
				{"type": "tool_use", "id": id, "name": "Tool1", "input": map[string]string{"command": "ls -la /workspace/ü"}}}},
			map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": id, "content": strings.Repeat("output line ✓\n", 80)}}})
	}
	b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": true,
		"system": []map[string]string{{"type": "text", "text": strings.Repeat("You are a coding agent. ", 1250)}}, "tools": tools, "messages": msgs})
	return string(b)
}

// benchCall posts body through front and drains the answer.
func benchCall(b *testing.B, c *http.Client, url, body string) {
	resp, err := c.Post(url+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n == 0 {
		b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
	}
}

// BenchmarkModelCall measures one streamed model call (text and a tool call)
// through a reverse proxy: plain to a scripted Anthropic API, and
// translated to a scripted OpenAI provider. The difference between the two
// in one run is the translation's added cost per call.
func BenchmarkModelCall(b *testing.B) {
	body := cliSizedRequest()
	args := map[string]string{"command": "cat hello.txt", "description": "Print hello.txt ✓"}
	c := &http.Client{}

	b.Run("anthropic_plain", func(b *testing.B) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(*scriptedapi.Request) scriptedapi.Turn {
			return scriptedapi.Turn{Blocks: []scriptedapi.Block{scriptedapi.Text("I'll print the file now."), scriptedapi.ToolUse("Bash", args)}}
		}))
		defer api.Close()
		target, _ := url.Parse(api.URL)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1
		front := httptest.NewServer(rp)
		defer front.Close()
		b.SetBytes(int64(len(body)))
		b.ResetTimer()
		for b.Loop() {
			benchCall(b, c, front.URL, body)
		}
	})
	b.Run("openai_translated", func(b *testing.B) {
		prov := scriptedopenai.Start(scriptedopenai.WithScript(func(*scriptedopenai.Request) scriptedopenai.Turn {
			return scriptedopenai.Turn{Text: "I'll print the file now.", Calls: []scriptedopenai.Call{scriptedopenai.NewCall("Bash", args)}}
		}))
		defer prov.Close()
		tr, err := anthropicopenai.New(anthropicopenai.Options{BaseURL: prov.URL, APIKey: "k", StreamUsage: true})
		require.NoError(b, err)
		target, _ := url.Parse("http://anthropic.invalid")
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport, rp.FlushInterval = tr, -1
		front := httptest.NewServer(rp)
		defer front.Close()
		b.SetBytes(int64(len(body)))
		b.ResetTimer()
		for b.Loop() {
			benchCall(b, c, front.URL, body)
		}
	})
}

// BenchmarkToChatCompletions is the request half of the translation alone.
func BenchmarkToChatCompletions(b *testing.B) {
	body := []byte(cliSizedRequest())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := anthropicopenai.ToChatCompletions(body, anthropicopenai.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
