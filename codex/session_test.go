package codex_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
)

const sessionID = "3f2b9c1e-8a4d-4e2f-9b7a-1c2d3e4f5a6b"

func TestTranscriptFile(t *testing.T) {
	req := baseRequest()
	req.SessionID = sessionID
	f, err := codex.New().TranscriptFile(req)
	require.NoError(t, err)
	assert.Equal(t, ".codex/sessions/agentbox/rollout-"+sessionID+".jsonl", f)
	req.SessionID = "../../etc/passwd"
	_, err = codex.New().TranscriptFile(req)
	assert.ErrorIs(t, err, executor.ErrInvalid)
}

// TestReplayTranscript checks the transcript a session starts from: the
// metadata line the CLI requires (verified on both pins: id, timestamp,
// cwd, originator and cli_version), naming the session where the
// middleware checks it too, then the turns as message items.
func TestReplayTranscript(t *testing.T) {
	req := baseRequest()
	req.SessionID = sessionID
	req.Messages = []executor.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "q1"}, {Role: "assistant", Content: "a1"},
		{Role: "user", Content: "q2"}, {Role: "user", Content: "now"}}
	data, anchors, err := codex.New().ReplayTranscript(req)
	require.NoError(t, err)
	assert.Equal(t, []string{"", "", ""}, anchors, "one per replayed message, none a fork point")
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 4)
	meta := lines[0]
	assert.Equal(t, "session_meta", meta["type"])
	assert.Equal(t, sessionID, meta["sessionId"])
	p := meta["payload"].(map[string]any)
	for _, k := range []string{"id", "timestamp", "cwd", "originator", "cli_version"} {
		assert.Contains(t, p, k)
	}
	assert.Equal(t, sessionID, p["id"])
	assert.Equal(t, "/workspace", p["cwd"])
	roles := []string{}
	for _, l := range lines[1:] {
		assert.Equal(t, "response_item", l["type"])
		assert.NotContains(t, l, "sessionId", "only the metadata names the session")
		roles = append(roles, l["payload"].(map[string]any)["role"].(string))
	}
	assert.Equal(t, []string{"user", "assistant", "user"}, roles, "the system message is developer instructions, the last is the prompt")

	req.Messages = req.Messages[4:]
	data, anchors, err = codex.New().ReplayTranscript(req)
	require.NoError(t, err)
	assert.Empty(t, anchors)
	assert.Equal(t, 1, bytes.Count(data, []byte("\n")), "a new session's transcript is its metadata alone")

	req.SessionID = "nope"
	_, _, err = codex.New().ReplayTranscript(req)
	assert.ErrorIs(t, err, executor.ErrInvalid)
}
