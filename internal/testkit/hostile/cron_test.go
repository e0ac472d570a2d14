package hostile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/hostile"
)

// TestAttackScheduledJobs: the agent cannot schedule prompts. Claude Code
// offers CronCreate, whose durable jobs go to .claude/scheduled_tasks.json
// in the workspace, and a CLI that resumes the job's session fires them as
// user prompts while it lives and idles (checked on the host with 2.1.330:
// a job planted in one process ran in the next one, which resumed the
// session, at the minute). A gateway turn's CLI is not idle for long, but
// a job is a prompt no user sent, run on some later request's budget: the
// runner turns the CLI's scheduler off, and the tool is not offered.
func TestAttackScheduledJobs(t *testing.T) {
	env := hostile.New(t, hostile.Options{})
	r := env.Run(t, hostile.Turn{Chat: "cron", Steps: []hostile.Step{
		hostile.Call("CronCreate", map[string]any{"cron": "* * * * *", "prompt": "PLANTED-CRON-PROMPT", "recurring": true, "durable": true}),
	}})
	r.RequireOK(t)
	require.NotNil(t, r.Init)
	assert.NotContains(t, r.Init.Tools, "CronCreate", "the CLI's scheduler is off")
	assert.True(t, r.Steps[0].IsError, "the call is refused: %s", r.Steps[0].Output)
	_, err := os.Stat(filepath.Join(r.Workspace, ".claude", "scheduled_tasks.json"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no job was written")
}
