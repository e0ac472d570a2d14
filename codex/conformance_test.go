package codex_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor/runnertest"
)

// pins are the CLI versions with recorded transcripts: the pin and the
// previous pin of examples/images/VERSIONS.
var pins = []string{"0.171.0", "0.169.0"}

// TestConformance runs the shared runner suite over real Codex CLI
// transcripts of each pin (TestE2E runs the same suite on live output of
// the image's CLI). The CLI's file_change items name the file, never its
// content.
func TestConformance(t *testing.T) {
	for _, v := range pins {
		t.Run(v, func(t *testing.T) {
			tr := runnertest.Transcripts{}
			for _, b := range []runnertest.Behaviour{runnertest.Plain, runnertest.WriteAndRun, runnertest.FailingTool, runnertest.ErrorResult} {
				raw, err := os.ReadFile(filepath.Join("testdata", "recorded-"+v, "conformance-"+string(b)+".jsonl"))
				require.NoError(t, err)
				tr[b] = raw
			}
			runnertest.Run(t, codex.New(), tr, runnertest.WriteWithoutContent())
		})
	}
}
