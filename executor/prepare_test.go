package executor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

func TestCmdPrepare(t *testing.T) {
	far := time.Now().Add(time.Hour)
	c, err := executor.Cmd{Args: []string{"ls"}}.Prepare("/workspace", time.Minute, 1024, far)
	require.NoError(t, err)
	assert.Equal(t, "/workspace", c.Dir, "Dir defaults to the workspace")
	assert.Equal(t, time.Minute, c.Timeout, "the backend's default timeout")
	assert.Equal(t, int64(1024), c.MaxOutput, "the backend's default output cap")

	c, err = executor.Cmd{Args: []string{"ls"}, Dir: "/tmp", Timeout: 2 * time.Hour, MaxOutput: 7}.Prepare("/workspace", time.Minute, 1024, far)
	require.NoError(t, err)
	assert.Equal(t, "/tmp", c.Dir)
	assert.LessOrEqual(t, c.Timeout, time.Hour, "cut to what is left before the deadline")
	assert.Equal(t, int64(7), c.MaxOutput)

	c, err = executor.Cmd{Args: []string{"ls"}}.Prepare("/workspace", time.Minute, 1024, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, time.Minute, c.Timeout, "no deadline, no cut")

	for name, tc := range map[string]struct {
		cmd      executor.Cmd
		deadline time.Time
		want     string
		is       error
	}{
		"env without =":    {executor.Cmd{Args: []string{"ls"}, Env: []string{"NOEQUALS"}}, far, "is not KEY=VALUE", executor.ErrInvalid},
		"env empty key":    {executor.Cmd{Args: []string{"ls"}, Env: []string{"=v"}}, far, "is not KEY=VALUE", executor.ErrInvalid},
		"relative dir":     {executor.Cmd{Args: []string{"ls"}, Dir: "src"}, far, "is relative", executor.ErrInvalid},
		"negative timeout": {executor.Cmd{Args: []string{"ls"}, Timeout: -1}, far, "negative Timeout", executor.ErrInvalid},
		"negative output":  {executor.Cmd{Args: []string{"ls"}, MaxOutput: -1}, far, "negative", executor.ErrInvalid},
		"deadline passed":  {executor.Cmd{Args: []string{"ls"}}, time.Now().Add(-time.Second), "passed its deadline", executor.ErrTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tc.cmd.Prepare("/workspace", time.Minute, 1024, tc.deadline)
			assert.ErrorIs(t, err, tc.is)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
