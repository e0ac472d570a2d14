package runnerkit_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/runnerkit"
)

func TestSplitConversation(t *testing.T) {
	req := executor.RunRequest{SystemPrompt: " own ", Messages: []executor.Message{{Role: "system", Content: "sys"},
		{Role: "user", Content: "q"}, {Role: "assistant", Content: " "}, {Role: "assistant", Content: "a"}, {Role: "user", Content: "now"}}}
	sys, prompt, err := runnerkit.SplitConversation(req)
	require.NoError(t, err)
	assert.Equal(t, "own\n\nsys", sys)
	assert.Equal(t, runnerkit.HistoryOpen+"\n"+runnerkit.HistoryIntro+"\n<user>\nq\n</user>\n<assistant>\na\n</assistant>\n"+runnerkit.HistoryClose+"\n\nnow", prompt)
	req.Resume, req.SessionID = true, "s"
	_, prompt, err = runnerkit.SplitConversation(req)
	require.NoError(t, err)
	assert.Equal(t, "now", prompt, "a continued session holds the history")

	for name, msgs := range map[string][]executor.Message{
		"empty":        nil,
		"ends answer":  {{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}},
		"blank prompt": {{Role: "user", Content: "  "}},
		"bad role":     {{Role: "tool", Content: "x"}, {Role: "user", Content: "q"}},
	} {
		_, _, err := runnerkit.SplitConversation(executor.RunRequest{Messages: msgs})
		assert.ErrorIs(t, err, executor.ErrInvalid, name)
	}
}

func TestIntArg(t *testing.T) {
	for _, v := range []any{3, int64(3), 3.0, "3"} {
		n, err := runnerkit.IntArg(v, 1, 5)
		require.NoError(t, err)
		assert.Equal(t, 3, n)
	}
	for _, v := range []any{0, 6, 2.5, "x", true, nil} {
		_, err := runnerkit.IntArg(v, 1, 5)
		assert.Error(t, err, "%v", v)
	}
}

func TestIncompleteError(t *testing.T) {
	sentinel := errors.New("x: no result")
	cause := errors.New("pipe closed")
	err := error(&runnerkit.IncompleteError{Sentinel: sentinel, Lines: 3, LastType: "assistant", Cause: cause})
	assert.ErrorIs(t, err, sentinel)
	assert.ErrorIs(t, err, cause)
	assert.NotErrorIs(t, err, errors.New("x: no result"))
	err = runnerkit.WithExit(err, executor.ExecResult{ExitCode: 137, OOMKilled: true}, "long stderr")
	assert.EqualError(t, err, `x: no result (after 3 lines, the last a "assistant"); it exited with code 137 after running out of memory (raise the sandbox's memory limit): pipe closed; stderr: long stderr`)
	assert.Equal(t, cause, runnerkit.WithExit(cause, executor.ExecResult{}, ""))
}
