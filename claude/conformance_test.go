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
// transcripts: the previous pin's with partial messages (as the runner
// invokes the CLI) and without, and the current pin's as TestE2E recorded
// them (TestE2E runs the same suite on live output of the image's CLI).
func TestConformance(t *testing.T) {
	sets := map[string]map[runnertest.Behaviour]string{
		"2.1.197 partial messages": {
			runnertest.Plain:       "../recorded/plain.jsonl",
			runnertest.WriteAndRun: "e2_partial_messages_tools.jsonl",
			runnertest.FailingTool: "b3_bash_denied_default_mode.jsonl",
			runnertest.ErrorResult: "d1_http401_maxretries1.jsonl",
		},
		"2.1.197 whole messages": {
			runnertest.Plain:       "a_plain_text.jsonl",
			runnertest.WriteAndRun: "b1_write_bash_acceptEdits.jsonl",
			runnertest.FailingTool: "b4_bash_denied_dontAsk.jsonl",
			runnertest.ErrorResult: "d2_http500_maxretries1.jsonl",
		},
		"2.1.330 partial messages": {
			runnertest.Plain:       "../recorded-2.1.330/conformance-plain.jsonl",
			runnertest.WriteAndRun: "../recorded-2.1.330/conformance-write_and_run.jsonl",
			runnertest.FailingTool: "../recorded-2.1.330/conformance-failing_tool.jsonl",
			runnertest.ErrorResult: "../recorded-2.1.330/conformance-error_result.jsonl",
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
