package middleware

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

func msgs(pairs ...string) []executor.Message {
	var out []executor.Message
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, executor.Message{Role: pairs[i], Content: pairs[i+1]})
	}
	return out
}

// TestSessionRecordMatch: a history resumes the stored session only when
// it is the stored conversation plus one message, forks it at an anchored
// earlier answer followed by one new user message, and does neither
// otherwise.
func TestSessionRecordMatch(t *testing.T) {
	stored := msgs("user", "run it", "assistant", "it printed 42", "user", "and now?", "assistant", "it printed 43")
	sys := systemHash(&executor.RunRequest{SystemPrompt: "You are a coder."})
	const a1, a2 = "b4abed25-0ee6-418a-9b81-e3d31e80705e", "6f84b028-6a1f-46e9-9704-d656e3be4a00"
	rec := &sessionRecord{SessionID: "s", Chain: conversationChain(stored), System: sys, Anchors: []string{"", a1, "", a2}}
	type want struct {
		resume bool
		anchor string
		kept   int
	}
	cases := map[string]struct {
		history []executor.Message
		want    want
	}{
		"stored plus a new message":   {append(stored, msgs("user", "thanks")...), want{resume: true, kept: 4}},
		"system messages are ignored": {append(msgs("system", "be brief"), append(stored, msgs("user", "thanks")...)...), want{resume: true, kept: 4}},
		"regenerated last answer":     {msgs("user", "run it", "assistant", "it printed 42", "user", "and now?"), want{anchor: a1, kept: 2}},
		"branch after turn 1":         {msgs("user", "run it", "assistant", "it printed 42", "user", "something else"), want{anchor: a1, kept: 2}},
		"regenerated first answer":    {msgs("user", "run it"), want{}},
		"edited first message":        {msgs("user", "run it!", "assistant", "it printed 42", "user", "thanks"), want{}},
		"edited answer":               {msgs("user", "run it", "assistant", "it printed 44", "user", "thanks"), want{}},
		"same conversation, no new":   {stored, want{}},
		"two new messages":            {append(stored, msgs("user", "a", "assistant", "b", "user", "c")...), want{}},
		"fork ending in an answer":    {msgs("user", "run it", "assistant", "it printed 42", "assistant", "more"), want{}},
		"prefix at an unanchored msg": {msgs("user", "run it", "user", "again"), want{}},
		"role swapped":                {msgs("assistant", "run it", "user", "it printed 42", "user", "thanks"), want{}},
		// Length-prefixed content: moving text across the boundary of two
		// messages changes the chain.
		"boundary shifted": {msgs("user", "run it\x00assistant", "assistant", "", "user", "thanks"), want{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resume, anchor, kept := rec.match(tc.history, sys)
			assert.Equal(t, tc.want, want{resume, anchor, kept})
		})
	}
	resume, anchor, _ := (&sessionRecord{}).match(msgs("user", "hi"), sys)
	assert.False(t, resume || anchor != "", "an empty record matches nothing")
	next := append(stored, msgs("user", "thanks")...)
	resume, _, _ = rec.match(next, "")
	assert.False(t, resume, "a record without the system prompt's hash (an older gateway's) is not resumed")
	_, anchor, _ = rec.match(msgs("user", "run it", "assistant", "it printed 42", "user", "x"), "other")
	assert.Empty(t, anchor, "nor forked under another system prompt")
	resume, anchor, _ = (&sessionRecord{SessionID: "s", Chain: rec.Chain}).match(msgs("user", "run it", "assistant", "it printed 42", "user", "x"), "")
	assert.False(t, resume)
	assert.Empty(t, anchor, "a record without anchors (an older gateway's) is never forked")
}

// TestLastAnswerEntry: the anchor is the last assistant entry's uuid, and
// only a UUID.
func TestLastAnswerEntry(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	ours := `{"type":"user","sessionId":"` + id + `"}` + "\n"
	transcript := ours + `{"type":"user","uuid":"acfd5573-5c61-4b58-9af7-d7e45c347f8e"}
{"type":"assistant","uuid":"b4abed25-0ee6-418a-9b81-e3d31e80705e"}
{"type":"attachment","uuid":"96941234-f47b-46ff-9c9f-31186c37ef58"}
{"type":"last-prompt","uuid":null}
`
	for name, c := range map[string]struct{ transcript, want string }{
		"the last answer": {transcript, "b4abed25-0ee6-418a-9b81-e3d31e80705e"},
		"not a UUID":      {ours + `{"type":"assistant","uuid":"--dangerously-skip-permissions"}`, ""},
		"no answer":       {ours + `{"type":"user","uuid":"acfd5573-5c61-4b58-9af7-d7e45c347f8e"}`, ""},
	} {
		got, err := validTranscript([]byte(c.transcript), id)
		require.NoError(t, err, name)
		assert.Equal(t, c.want, got, name)
	}
	got, err := validTranscript([]byte(transcript+`{"type":"assistant","uuid":7}`+"\n"+`{"type":["assistant"],"uuid":"acfd5573-5c61-4b58-9af7-d7e45c347f8e"}`+"\n"), id)
	require.NoError(t, err)
	assert.Equal(t, "b4abed25-0ee6-418a-9b81-e3d31e80705e", got, "entries whose uuid or type is not a string are not answers")
}

// TestSystemHash: the hash covers the assistant's instructions and every
// system message, and tells apart prompts that only differ in where one
// part ends.
func TestSystemHash(t *testing.T) {
	base := &executor.RunRequest{SystemPrompt: "You are a coder.", Messages: msgs("user", "hi")}
	h := systemHash(base)
	assert.Equal(t, h, systemHash(&executor.RunRequest{SystemPrompt: "You are a coder.", Messages: msgs("user", "other text", "assistant", "x")}),
		"user and assistant messages are not part of it")
	for name, rr := range map[string]*executor.RunRequest{
		"other instructions": {SystemPrompt: "You are a tester.", Messages: msgs("user", "hi")},
		"a system message":   {SystemPrompt: "You are a coder.", Messages: msgs("system", "Answer in French.", "user", "hi")},
		"boundary shifted":   {SystemPrompt: "You are a", Messages: msgs("system", " coder.", "user", "hi")},
	} {
		assert.NotEqual(t, h, systemHash(rr), name)
	}
}

func TestValidTranscript(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	good := `{"type":"user","sessionId":"` + id + `","message":{"role":"user","content":"hi"}}` + "\n" +
		`{"type":"summary","summary":"x"}` + "\n"
	_, err := validTranscript([]byte(good), id)
	require.NoError(t, err)
	cases := map[string]string{
		"empty":              "",
		"not json":           good + "rm -rf /\n",
		"array line":         good + "[1,2]\n",
		"other session":      good + `{"type":"user","sessionId":"11111111-2222-4333-8444-555555555555"}` + "\n",
		"no line names ours": `{"type":"summary"}` + "\n",
		// The CLI's JSON.parse takes a duplicate key's last value.
		"duplicate key, last names another": good + `{"sessionId":"` + id + `","sessionId":"11111111-2222-4333-8444-555555555555"}` + "\n",
		"key in other case names another":   good + `{"SESSIONID":"11111111-2222-4333-8444-555555555555"}` + "\n",
		"truncated line":                    good + `{"type":"user","sessionId":"` + id,
		"too long":                          good + `{"pad":"` + strings.Repeat("a", maxTranscript) + `"}` + "\n",
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := validTranscript([]byte(data), id)
			assert.ErrorIs(t, err, errBadTranscript)
		})
	}
}

func TestSessionStoreRoundTripAndDamage(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	s := &sessionStore{dir: t.TempDir()}
	dir, err := s.chatDir("alice", "1", "coder")
	require.NoError(t, err)
	_, err = s.chatDir("alice", "1", "../x")
	assert.Error(t, err, "an assistant id cannot climb out")

	rec, data, err := s.load(dir)
	require.NoError(t, err)
	assert.Nil(t, rec, "nothing stored yet")
	assert.Nil(t, data)

	transcript := []byte(`{"type":"user","sessionId":"` + id + `"}` + "\n")
	want := &sessionRecord{SessionID: id, Chain: conversationChain(msgs("user", "a", "assistant", "b")), Updated: time.Now().UTC().Truncate(time.Second)}
	require.NoError(t, s.save(dir, want, transcript))
	rec, data, err = s.load(dir)
	require.NoError(t, err)
	assert.Equal(t, want, rec)
	assert.Equal(t, transcript, data)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "sessions are the gateway's alone")

	// A transcript of another session (a crash between the two writes, or
	// a planted file) is dropped with its record.
	require.NoError(t, os.WriteFile(filepath.Join(dir, transcriptName), []byte(`{"sessionId":"other"}`+"\n"), 0o600))
	rec, _, err = s.load(dir)
	assert.ErrorIs(t, err, errBadTranscript)
	assert.Nil(t, rec)
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the damaged session is removed")

	require.NoError(t, s.save(dir, want, transcript))
	require.NoError(t, os.WriteFile(filepath.Join(dir, sessionRecordName), []byte("{"), 0o600))
	rec, _, err = s.load(dir)
	assert.ErrorIs(t, err, errBadTranscript)
	assert.Nil(t, rec)
}

func TestNewSessionID(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newSessionID(), newSessionID()
	assert.Regexp(t, uuid, a)
	assert.NotEqual(t, a, b)
}

func TestForgetFailedResume(t *testing.T) {
	cases := map[string]struct {
		resumed  bool
		err      error
		wantKept bool
	}{
		"resumed run failed in the agent": {true, Errorf(KindAgent, nil, "boom"), false},
		"resumed run timed out":           {true, Errorf(KindTimeout, nil, "slow"), false},
		"resumed run canceled":            {true, Errorf(KindCanceled, nil, "gone"), true},
		"resumed run, runtime down":       {true, Errorf(KindUnavailable, nil, "down"), true},
		"fresh run failed":                {false, Errorf(KindAgent, nil, "boom"), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "alice", "chat-1", "coder")
			require.NoError(t, os.MkdirAll(dir, 0o700))
			r := &run{log: hclog.NewNullLogger(), session: &chatSession{dir: dir, resumed: tc.resumed}}
			r.forgetFailedResume(tc.err)
			_, err := os.Stat(dir)
			if tc.wantKept {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, os.ErrNotExist)
			}
		})
	}
}
