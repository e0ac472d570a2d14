package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenAIConnectorOptions(t *testing.T) {
	conn := func(typ, extra string) map[string]string {
		return map[string]string{"connectors/p.conn.yao": `{"type": "` + typ + `", "options": {"model": "m", "key": "k"` + extra + `}}`,
			"assistants/qa/package.yao": `{"name": "Q&A", "connector": "p"}`}
	}
	g, err := Load(writeTree(t, conn("openai", `, "reasoning_field": "reasoning_content", "thinking": "enable_thinking", "max_tokens": 8192, "max_completion_tokens": true`)), testOptions())
	require.NoError(t, err)
	assert.Equal(t, OpenAIOptions{ReasoningField: "reasoning_content", Thinking: "enable_thinking", StreamUsage: true, MaxTokens: 8192, MaxCompletionTokens: true, API: OpenAIAPIChat}, g.Connectors["p"].OpenAI)

	g, err = Load(writeTree(t, conn("openai", `, "stream_usage": false`)), testOptions())
	require.NoError(t, err)
	assert.False(t, g.Connectors["p"].OpenAI.StreamUsage)

	g, err = Load(writeTree(t, conn("openai", `, "api": "responses"`)), testOptions())
	require.NoError(t, err)
	assert.Equal(t, OpenAIAPIResponses, g.Connectors["p"].OpenAI.API)

	for name, tc := range map[string]struct{ typ, extra, want string }{
		"on an anthropic connector": {"anthropic", `, "reasoning_field": "reasoning"`, "only openai connectors have reasoning_field"},
		"unknown reasoning field":   {"openai", `, "reasoning_field": "thoughts"`, "reasoning_field"},
		"unknown thinking style":    {"openai", `, "thinking": "always"`, "thinking"},
		"zero ceiling":              {"openai", `, "max_tokens": 0`, "not positive"},
		"string boolean":            {"openai", `, "stream_usage": "yes"`, "stream_usage"},
		"unknown api":               {"openai", `, "api": "completions"`, "options.api"},
		"api of an anthropic one":   {"anthropic", `, "api": "responses"`, "only openai connectors have api"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeTree(t, conn(tc.typ, tc.extra)), testOptions())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
