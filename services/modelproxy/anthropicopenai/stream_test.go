package anthropicopenai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sse joins chunks as a provider stream.
func sse(chunks ...string) string {
	var sb strings.Builder
	for _, c := range chunks {
		sb.WriteString("data: " + c + "\n\n")
	}
	return sb.String()
}

type event struct {
	name string
	data map[string]any
}

// parseEvents parses an Anthropic stream strictly: every event has a name
// matching its data's type, block indexes open and close in order.
func parseEvents(t *testing.T, s string) []event {
	t.Helper()
	var out []event
	open := -1
	next := 0
	for _, rec := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		if rec == "" {
			continue
		}
		lines := strings.SplitN(rec, "\n", 2)
		require.Len(t, lines, 2, "event %q", rec)
		name, ok := strings.CutPrefix(lines[0], "event: ")
		require.True(t, ok, rec)
		data, ok := strings.CutPrefix(lines[1], "data: ")
		require.True(t, ok, rec)
		var d map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &d), data)
		require.Equal(t, name, d["type"])
		switch name {
		case "content_block_start":
			require.Equal(t, -1, open, "a block starts while another is open")
			require.EqualValues(t, next, d["index"])
			open = next
			next++
		case "content_block_delta":
			require.EqualValues(t, open, d["index"], "a delta for a block that is not open")
		case "content_block_stop":
			require.EqualValues(t, open, d["index"])
			open = -1
		case "message_delta", "message_stop":
			require.Equal(t, -1, open, "the message ends with a block open")
		}
		out = append(out, event{name, d})
	}
	return out
}

func run(t *testing.T, in string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := translateStream(strings.NewReader(in), &out, "claude-x", "", hclog.NewNullLogger())
	return out.String(), err
}

func TestStreamEdgeCases(t *testing.T) {
	role := `{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`
	t.Run("index reused for a second call", func(t *testing.T) {
		out, err := run(t, sse(role,
			`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"X","arguments":"{\"n\":1}"}}]}}]}`,
			`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"Y","arguments":"{}"}}]}}]}`,
			`{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, `[DONE]`))
		require.NoError(t, err)
		evs := parseEvents(t, out)
		var ids []string
		for _, e := range evs {
			if e.name == "content_block_start" {
				ids = append(ids, e.data["content_block"].(map[string]any)["id"].(string))
			}
		}
		assert.Equal(t, []string{"a", "b"}, ids)
		assert.Contains(t, out, `"stop_reason":"tool_use"`, "a turn with calls is tool_use even when the provider says stop")
	})
	t.Run("interleaved arguments fail loudly", func(t *testing.T) {
		out, err := run(t, sse(role,
			`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"X","arguments":"{"}},{"index":1,"id":"b","function":{"name":"Y","arguments":"{"}}]}}]}`,
			`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}`))
		assert.ErrorIs(t, err, ErrInterleavedToolCalls)
		evs := parseEvents(t, out)
		assert.Equal(t, "error", evs[len(evs)-1].name)
	})
	t.Run("no arguments become an empty object", func(t *testing.T) {
		out, err := run(t, sse(role, `{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"X"}}]},"finish_reason":"tool_calls"}]}`, `[DONE]`))
		require.NoError(t, err)
		parseEvents(t, out)
		assert.Contains(t, out, `"partial_json":"{}"`)
	})
	t.Run("finish without DONE is complete", func(t *testing.T) {
		out, err := run(t, sse(role, `{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`))
		require.NoError(t, err)
		evs := parseEvents(t, out)
		assert.Equal(t, "message_stop", evs[len(evs)-1].name)
	})
	t.Run("comments, event names and unknown lines are skipped", func(t *testing.T) {
		out, err := run(t, ": keep-alive\n\nevent: chunk\nid: 3\n"+sse(role, `{"id":"c1","choices":[{"index":0,"delta":{"content":"hi","weird":1}}]}`)+"garbage line\n"+sse(`{"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_cache_hit_tokens":4}}`, `{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, "[DONE]"))
		require.NoError(t, err)
		evs := parseEvents(t, out)
		u := evs[len(evs)-2].data["usage"].(map[string]any)
		assert.EqualValues(t, 5, u["input_tokens"], "DeepSeek's prompt_cache_hit_tokens are cache reads")
		assert.EqualValues(t, 4, u["cache_read_input_tokens"])
	})
	t.Run("no usage is estimated", func(t *testing.T) {
		out, err := run(t, sse(role, `{"id":"c1","choices":[{"index":0,"delta":{"content":"`+strings.Repeat("a", 400)+`"},"finish_reason":"stop"}]}`, "[DONE]"))
		require.NoError(t, err)
		evs := parseEvents(t, out)
		assert.EqualValues(t, 100, evs[len(evs)-2].data["usage"].(map[string]any)["output_tokens"])
	})
	t.Run("reasoning field configured", func(t *testing.T) {
		var out bytes.Buffer
		err := translateStream(strings.NewReader(sse(role,
			`{"id":"c1","choices":[{"index":0,"delta":{"reasoning_content":"ignored","reasoning":"used"}}]}`,
			`{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)), &out, "m", "reasoning", hclog.NewNullLogger())
		require.NoError(t, err)
		assert.Contains(t, out.String(), `"thinking":"used"`)
		assert.NotContains(t, out.String(), "ignored")
	})
	t.Run("chunk that is not JSON", func(t *testing.T) {
		out, err := run(t, sse(role, `{not json`))
		require.Error(t, err)
		assert.Equal(t, "error", parseEvents(t, out)[len(parseEvents(t, out))-1].name)
	})
	t.Run("empty stream", func(t *testing.T) {
		out, err := run(t, "")
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		evs := parseEvents(t, out)
		assert.Equal(t, []string{"message_start", "ping", "error"}, []string{evs[0].name, evs[1].name, evs[2].name})
	})
}

func TestReadLineCap(t *testing.T) {
	long := strings.Repeat("x", MaxLineBytes+10) + "\n"
	_, err := readLine(bufio.NewReader(strings.NewReader(long)))
	assert.ErrorIs(t, err, ErrLineTooLong)
	line, err := readLine(bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 200<<10)+"\r\nnext"), 16))
	require.NoError(t, err)
	assert.Len(t, line, 200<<10, "lines longer than the buffer are joined, and CRLF is trimmed")

	out, err := run(t, "data: "+strings.Repeat("z", MaxLineBytes+1)+"\n\n")
	assert.ErrorIs(t, err, ErrLineTooLong, "an over-long line fails the stream, not ends it cleanly")
	assert.Contains(t, out, "event: error")
}

// FuzzTranslateStream feeds arbitrary provider streams: the translator must
// not panic, and what it writes must be a well-formed Anthropic stream that
// ends in message_stop exactly when it reports no error.
func FuzzTranslateStream(f *testing.F) {
	f.Add(sse(`{"id":"c","choices":[{"index":0,"delta":{"content":"hé"}}]}`, `{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, "[DONE]"))
	f.Add(sse(`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"X","arguments":"{\"a\""}}]}}]}`, `{"error":{"message":"x"}}`))
	f.Add(sse(`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}`, `{"id":"c","choices":[{"index":1,"delta":{"content":"z"},"finish_reason":"length"}]}`))
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		err := translateStream(strings.NewReader(in), &out, "m", "", hclog.NewNullLogger())
		evs := parseEvents(t, out.String())
		require.NotEmpty(t, evs)
		last := evs[len(evs)-1].name
		if err == nil {
			assert.Contains(t, []string{"message_stop", "error"}, last)
		} else {
			assert.Equal(t, "error", last, "a failed stream tells the client: %v", err)
			assert.False(t, errors.Is(err, io.EOF))
		}
	})
}
