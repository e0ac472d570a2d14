package runnertest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/runnertest"
)

// load reads one transcript per behaviour from dir.
func load(t *testing.T, dir string, files map[runnertest.Behaviour]string) runnertest.Transcripts {
	t.Helper()
	tr := runnertest.Transcripts{}
	for b, f := range files {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		tr[b] = raw
	}
	return tr
}

// TestRunnersAgree runs the suite for both runners (Claude over real CLI
// transcripts, Cursor over transcripts written to its documented schema)
// and checks that they describe each behaviour the same way: the same tool
// names in the same order, the same tool result errors, text or not, and
// the same end state. CutStream is derived for both from WriteAndRun.
func TestRunnersAgree(t *testing.T) {
	runners := map[string]struct {
		runner executor.Runner
		tr     runnertest.Transcripts
	}{
		"claude": {claude.New(), load(t, "../../claude/testdata/cli-2.1.197", map[runnertest.Behaviour]string{
			runnertest.Plain:       "a_plain_text.jsonl",
			runnertest.WriteAndRun: "b1_write_bash_acceptEdits.jsonl",
			runnertest.FailingTool: "b3_bash_denied_default_mode.jsonl",
			runnertest.ErrorResult: "d1_http401_maxretries1.jsonl",
		})},
		"cursor": {cursor.New(), load(t, "../../cursor/testdata", map[runnertest.Behaviour]string{
			runnertest.Plain:       "b_plain_partial.jsonl",
			runnertest.WriteAndRun: "c_write_and_shell.jsonl",
			runnertest.FailingTool: "d_failing_tool.jsonl",
			runnertest.ErrorResult: "e_error_result.jsonl",
		})},
	}
	outcomes := map[string]map[runnertest.Behaviour]runnertest.Outcome{}
	for name, r := range runners {
		t.Run(name, func(t *testing.T) { outcomes[name] = runnertest.Run(t, r.runner, r.tr) })
	}
	require.Len(t, outcomes, 2)
	for _, b := range runnertest.Behaviours {
		t.Run("agree/"+string(b), func(t *testing.T) {
			cl, cu := outcomes["claude"][b].Shape(), outcomes["cursor"][b].Shape()
			t.Logf("claude: %s", cl)
			t.Logf("cursor: %s", cu)
			assert.Equal(t, cl.Tools, cu.Tools, "tool uses and results")
			assert.Equal(t, cl.End, cu.End, "end state")
			assert.Equal(t, cl.Text, cu.Text, "text or not")
			assert.Equal(t, outcomes["claude"][b].Completion.FinishReason, outcomes["cursor"][b].Completion.FinishReason)
			assert.Equal(t, outcomes["claude"][b].Completion.IsError, outcomes["cursor"][b].Completion.IsError)
		})
	}
}
