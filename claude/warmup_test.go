package claude_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
)

// TestWarmUpLines: the warm-up line is one stream-json control request
// ending in a newline, and end accepts its progress line, ends at its
// answer (with an error when the CLI refused it), and refuses any other
// line, including another request's answer.
func TestWarmUpLines(t *testing.T) {
	line, end := claude.New().WarmUp()
	require.Equal(t, byte('\n'), line[len(line)-1])
	var req struct {
		Type      string `json:"type"`
		RequestID string `json:"request_id"`
		Request   struct {
			Subtype  string `json:"subtype"`
			Question string `json:"question"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal(line, &req))
	assert.Equal(t, "control_request", req.Type)
	assert.Equal(t, "side_question", req.Request.Subtype)
	assert.NotEmpty(t, req.Request.Question)
	id := req.RequestID

	for name, tc := range map[string]struct {
		line       string
		done, fail bool
	}{
		"progress":                   {line: `{"type":"system","subtype":"control_request_progress","request_id":"` + id + `","status":"started"}`},
		"answer":                     {line: `{"type":"control_response","response":{"subtype":"success","request_id":"` + id + `","response":{"response":"ok"}}}`, done: true},
		"refused":                    {line: `{"type":"control_response","response":{"subtype":"error","request_id":"` + id + `","error":"Unsupported control request subtype: side_question"}}`, done: true, fail: true},
		"another request's answer":   {line: `{"type":"control_response","response":{"subtype":"success","request_id":"other"}}`, fail: true},
		"another request's progress": {line: `{"type":"system","subtype":"control_request_progress","request_id":"other"}`, fail: true},
		"a turn started":             {line: `{"type":"system","subtype":"init","session_id":"s"}`, fail: true},
		"an answer":                  {line: `{"type":"assistant","message":{"content":[]}}`, fail: true},
		"a result":                   {line: `{"type":"result","subtype":"success"}`, fail: true},
		"not JSON":                   {line: `Error: something`, fail: true},
		"empty":                      {line: ``, fail: true},
	} {
		t.Run(name, func(t *testing.T) {
			done, err := end([]byte(tc.line))
			assert.Equal(t, tc.done, done)
			if tc.fail {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
