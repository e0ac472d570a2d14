package cursor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor/runnertest"
)

// Transcripts returns the cursor transcripts of the conformance suite's
// behaviours, read from dir (this package's testdata).
func transcripts(t *testing.T, dir string) runnertest.Transcripts {
	t.Helper()
	files := map[runnertest.Behaviour]string{
		runnertest.Plain:       "b_plain_partial.jsonl",
		runnertest.WriteAndRun: "c_write_and_shell.jsonl",
		runnertest.FailingTool: "d_failing_tool.jsonl",
		runnertest.ErrorResult: "e_error_result.jsonl",
		runnertest.CutStream:   "f_cut_before_result.jsonl",
	}
	tr := runnertest.Transcripts{}
	for b, name := range files {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		tr[b] = raw
	}
	return tr
}

func TestConformance(t *testing.T) {
	runnertest.Run(t, cursor.New(), transcripts(t, "testdata"))
}

// TestConformanceWithoutPartialOutput runs the suite over the plain
// transcript recorded without --stream-partial-output and a derived cut.
func TestConformanceWithoutPartialOutput(t *testing.T) {
	tr := transcripts(t, "testdata")
	raw, err := os.ReadFile("testdata/a_plain_text.jsonl")
	require.NoError(t, err)
	tr[runnertest.Plain] = raw
	delete(tr, runnertest.CutStream)
	runnertest.Run(t, cursor.New(cursor.WithoutPartialOutput()), tr)
}
