package claude_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
)

const (
	sessionID = "0f8fad5b-d9cb-469f-a165-70867728950e"
	forkFrom  = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	resumeAt  = "b4abed25-0ee6-418a-9b81-e3d31e80705e"
)

func stdinText(t *testing.T, stdin []byte) string {
	t.Helper()
	var line struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(stdin, &line))
	return line.Message.Content
}

func TestInvocationSessionFlags(t *testing.T) {
	history := []executor.Message{
		{Role: "user", Content: "My name is Bob."},
		{Role: "assistant", Content: "Nice to meet you, Bob."},
		{Role: "user", Content: "What is my name?"},
	}
	cases := map[string]struct {
		id          string
		resume      bool
		fork        bool
		wantFlag    string
		wantValue   string
		wantHistory bool
	}{
		"no session":  {wantFlag: "--no-session-persistence", wantHistory: true},
		"new session": {id: sessionID, wantFlag: "--session-id", wantValue: sessionID, wantHistory: true},
		"resumed":     {id: sessionID, resume: true, wantFlag: "--resume", wantValue: sessionID},
		"forked":      {id: sessionID, fork: true, wantFlag: "--fork-session"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			req.Messages, req.SessionID, req.Resume = history, tc.id, tc.resume
			if tc.fork {
				req.ForkFrom, req.ResumeAt = forkFrom, resumeAt
			}
			inv, err := claude.New().Invocation(req)
			require.NoError(t, err)
			if tc.fork {
				for flag, want := range map[string]string{"--session-id": sessionID, "--resume": forkFrom, "--resume-session-at": resumeAt} {
					v, ok := flagValue(inv.Args, flag)
					assert.True(t, ok, "%s in %q", flag, inv.Args)
					assert.Equal(t, want, v, flag)
				}
				assert.NotContains(t, inv.Args, "--no-session-persistence")
				assert.Equal(t, "What is my name?", stdinText(t, inv.Stdin), "a forked session gets the new message only")
				return
			}
			v, ok := flagValue(inv.Args, tc.wantFlag)
			if tc.wantValue != "" {
				assert.True(t, ok, "%q", inv.Args)
				assert.Equal(t, tc.wantValue, v)
			} else {
				assert.Contains(t, inv.Args, tc.wantFlag)
			}
			for _, other := range []string{"--no-session-persistence", "--session-id", "--resume"} {
				if other != tc.wantFlag {
					assert.NotContains(t, inv.Args, other)
				}
			}
			prompt := stdinText(t, inv.Stdin)
			if tc.wantHistory {
				assert.Contains(t, prompt, "<conversation_history>")
				assert.Contains(t, prompt, "My name is Bob.")
			} else {
				assert.Equal(t, "What is my name?", prompt, "a resumed session gets the new message only")
			}
		})
	}
}

func TestInvocationSessionErrors(t *testing.T) {
	cases := map[string]func(*executor.RunRequest){
		"resume without id": func(r *executor.RunRequest) { r.Resume = true },
		"id not a uuid":     func(r *executor.RunRequest) { r.SessionID = "../../etc/passwd" },
		"upper-case uuid":   func(r *executor.RunRequest) { r.SessionID = "0F8FAD5B-D9CB-469F-A165-70867728950E" },
		"flag as id":        func(r *executor.RunRequest) { r.SessionID, r.Resume = "--dangerously-skip-permissions", true },
		"fork without id":   func(r *executor.RunRequest) { r.ForkFrom, r.ResumeAt = forkFrom, resumeAt },
		"fork and resume": func(r *executor.RunRequest) {
			r.SessionID, r.Resume, r.ForkFrom, r.ResumeAt = sessionID, true, forkFrom, resumeAt
		},
		"fork without at": func(r *executor.RunRequest) { r.SessionID, r.ForkFrom = sessionID, forkFrom },
		"fork at a flag": func(r *executor.RunRequest) {
			r.SessionID, r.ForkFrom, r.ResumeAt = sessionID, forkFrom, "--dangerously-skip-permissions"
		},
		"fork from itself": func(r *executor.RunRequest) { r.SessionID, r.ForkFrom, r.ResumeAt = sessionID, sessionID, resumeAt },
		"sessions off": func(r *executor.RunRequest) {
			r.SessionID, r.Arguments = sessionID, map[string]any{"sessions": false}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			req := baseRequest()
			mutate(&req)
			_, err := claude.New().Invocation(req)
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	}
}

func TestSessionsArgument(t *testing.T) {
	r := claude.New()
	req := baseRequest()
	assert.True(t, r.SessionsEnabled(req), "on by default")
	req.Arguments = map[string]any{"sessions": false}
	assert.False(t, r.SessionsEnabled(req))
	req.Arguments = map[string]any{"sessions": "no"}
	assert.False(t, r.SessionsEnabled(req), "an invalid value is not a yes")
	_, err := claude.ParseArguments(req.Arguments)
	assert.ErrorIs(t, err, executor.ErrInvalid)
	assert.ErrorContains(t, err, "sandbox.arguments.sessions")
}

func TestTranscriptFile(t *testing.T) {
	r := claude.New()
	req := baseRequest()
	req.SessionID = sessionID
	got, err := r.TranscriptFile(req)
	require.NoError(t, err)
	assert.Equal(t, ".claude/projects/-workspace/"+sessionID+".jsonl", got)
	req.Workdir = "/home/agent/my.project_1"
	got, err = r.TranscriptFile(req)
	require.NoError(t, err)
	assert.Equal(t, ".claude/projects/-home-agent-my-project-1/"+sessionID+".jsonl", got)
	req.SessionID = "x/../../y"
	_, err = r.TranscriptFile(req)
	assert.ErrorIs(t, err, executor.ErrInvalid)
}

// TestReplayTranscript: the history before the last message becomes the
// new session's user and assistant entries, chained, with an anchor per
// answer; histories of other shapes are refused so the caller falls back
// to text.
func TestReplayTranscript(t *testing.T) {
	const sid = "0b6f2c4e-1a2b-4c3d-8e9f-001122334455"
	req := executor.RunRequest{SessionID: sid, Workdir: "/workspace", Model: "claude-sonnet-4-6", Messages: []executor.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "first (edited)"}, {Role: "assistant", Content: "one"},
		{Role: "user", Content: "second"}, {Role: "assistant", Content: "two"},
		{Role: "user", Content: "third"},
	}}
	data, anchors, err := claude.New().ReplayTranscript(req)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 4, "the system message and the last message are not entries")
	require.Len(t, anchors, 4)
	var parent any
	for i, l := range lines {
		var e struct {
			Parent    any    `json:"parentUuid"`
			Type      string `json:"type"`
			UUID      string `json:"uuid"`
			SessionID string `json:"sessionId"`
			Cwd       string `json:"cwd"`
			Message   struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"message"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		assert.Equal(t, parent, e.Parent, "entry %d is chained to the one before", i)
		assert.Equal(t, sid, e.SessionID)
		assert.Equal(t, "/workspace", e.Cwd)
		assert.Equal(t, e.Type, e.Message.Role)
		assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, e.UUID)
		if e.Type == "assistant" {
			assert.Equal(t, e.UUID, anchors[i], "an answer's entry is its anchor")
		} else {
			assert.Empty(t, anchors[i])
		}
		parent = e.UUID
	}
	assert.Contains(t, lines[0], `"content":"first (edited)"`)
	assert.Contains(t, lines[3], `"text":"two"`)

	for name, msgs := range map[string][]executor.Message{
		"answer first":       {{Role: "assistant", Content: "hi"}, {Role: "user", Content: "x"}},
		"two users in a row": {{Role: "user", Content: "a"}, {Role: "user", Content: "b"}, {Role: "user", Content: "c"}},
		"nothing before":     {{Role: "user", Content: "x"}},
	} {
		_, _, err := claude.New().ReplayTranscript(executor.RunRequest{SessionID: sid, Messages: msgs})
		assert.ErrorIs(t, err, executor.ErrInvalid, name)
	}
	_, _, err = claude.New().ReplayTranscript(executor.RunRequest{SessionID: "not-a-uuid", Messages: req.Messages})
	assert.ErrorIs(t, err, executor.ErrInvalid)
}
