package claude_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor/runnertest"
)

// TestConformance runs the shared runner suite over real Claude Code
// transcripts: with partial messages (as the runner invokes the CLI) and
// without.
func TestConformance(t *testing.T) {
	sets := map[string]map[runnertest.Behaviour]string{
		"partial messages": {
			runnertest.Plain:       "../recorded/plain.jsonl",
			runnertest.WriteAndRun: "e2_partial_messages_tools.jsonl",
			runnertest.FailingTool: "b3_bash_denied_default_mode.jsonl",
			runnertest.ErrorResult: "d1_http401_maxretries1.jsonl",
		},
		"whole messages": {
			runnertest.Plain:       "a_plain_text.jsonl",
			runnertest.WriteAndRun: "b1_write_bash_acceptEdits.jsonl",
			runnertest.FailingTool: "b4_bash_denied_dontAsk.jsonl",
			runnertest.ErrorResult: "d2_http500_maxretries1.jsonl",
		},
	}
	for name, files := range sets {
		t.Run(name, func(t *testing.T) {
			tr := runnertest.Transcripts{}
			for b, f := range files {
				raw, err := os.ReadFile(filepath.Join("testdata/cli-2.1.197", f))
				require.NoError(t, err)
				tr[b] = raw
			}
			runnertest.Run(t, claude.New(), tr)
		})
	}
}
