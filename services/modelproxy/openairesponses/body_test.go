package openairesponses

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestReadAsBefore: the one-pass reader reads a body as gjson did (the
// first of a repeated name, a non-array as a list of itself, a scalar as
// its JSON text), keeps texts' escapes, and sends valid UTF-8 on.
func TestReadAsBefore(t *testing.T) {
	for name, tc := range map[string]struct {
		body, path, want string
	}{
		"repeated name, first wins":   {`{"model":"a","model":"b","input":"hi"}`, "model", "a"},
		"object as a list of itself":  {`{"input":{"role":"user","content":"hi"}}`, "messages.0.content", "hi"},
		"invalid UTF-8 replaced":      {"{\"input\":\"a\xffb\"}", "messages.0.content", "a\uFFFDb"},
		"lone surrogate replaced":     {`{"input":"a\ud800b"}`, "messages.0.content", "a\uFFFDb"},
		"surrogate pair kept":         {`{"input":"a\ud83d\ude00b"}`, "messages.0.content", "a😀b"},
		"escapes kept":                {`{"input":"l\n\"q\" <b> \u00e9\\"}`, "messages.0.content", "l\n\"q\" <b> é\\"},
		"number text as its JSON":     {`{"input":[{"role":"user","content":[{"type":"input_text","text":5}]}]}`, "messages.0.content", "5"},
		"texts joined":                {`{"instructions":"a\"","input":[{"role":"developer","content":"b\n"},{"role":"user","content":"u"}]}`, "messages.0.content", "a\"\n\nb\n"},
		"escaped member name":         {`{"mod\u0065l":"m","input":"hi"}`, "model", "m"},
		"string stream as gjson Bool": {`{"stream":"true","input":"hi"}`, "stream", "true"},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := decodeRequest([]byte(tc.body))
			require.NoError(t, err)
			b, err := chatBody(r, ChatOptions{})
			require.NoError(t, err)
			require.True(t, jsontext.Value(b).IsValid(), "%s", b)
			assert.Equal(t, tc.want, gjson.GetBytes(b, tc.path).String(), "%s", b)
		})
	}
}

// TestReadRefuses: a body that is not one JSON value is refused whatever
// else is wrong with it.
func TestReadRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"empty":               ``,
		"two values":          `{"input":"a"} {}`,
		"cut":                 `{"input":[{"role":"user","content":"a"}`,
		"bad item then cut":   `{"input":[{"type":"bogus"},`,
		"control character":   "{\"input\":\"a\x01\"}",
		"bad choice then cut": `{"tool_choice":"x","input":[`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeRequest([]byte(body))
			require.EqualError(t, err, "the request body is not valid JSON")
		})
	}
}

// TestToolUseInput: a call's arguments pass to the Messages API as they
// are when encoding/json's round trip would give the same JSON, and go
// through it otherwise.
func TestToolUseInput(t *testing.T) {
	for name, tc := range map[string]struct {
		args, want string
		raw        bool
	}{
		"strings and ints":     {`{"cmd":"ls <a>","n":5,"o":{"x":[1,-2]}}`, `{"cmd":"ls <a>","n":5,"o":{"x":[1,-2]}}`, true},
		"a fraction":           {`{"t":1.50}`, `{"t":1.50}`, true},
		"an exponent":          {`{"t":1e-5}`, `{"t":1e-5}`, true},
		"a big integer":        {`{"n":12345678901234567}`, `{"n":12345678901234567}`, true},
		"a repeated name":      {`{"a":1,"a":2}`, `{"a":2}`, false},
		"invalid UTF-8":        {"{\"a\":\"\xff\"}", "{\"a\":\"\uFFFD\"}", false},
		"not an object":        {`[12345678901234567]`, `{"arguments":[12345678901234567]}`, false},
		"not JSON":             {`ls`, `{"arguments":"ls"}`, false},
		"two objects":          {`{} {}`, `{"arguments":"{} {}"}`, false},
		"data after an object": {`{} x`, `{"arguments":"{} x"}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			_, raw := rawInput(jsontext.NewDecoder(strings.NewReader("")), tc.args)
			assert.Equal(t, tc.raw, raw)
			b, ok := messagesContent(part{kind: "call", id: "c", name: "f", args: tc.args}, jsontext.NewDecoder(strings.NewReader("")))
			require.True(t, ok)
			assert.Equal(t, tc.want, string(b.Input), "exactly: a number's digits too")
		})
	}
}
