package middleware_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// BenchmarkTurnWithCheckpoints is issue 34's "a turn with checkpoints on
// costs <= 1.05x the same turn with them off, end to end": the whole stack
// (HTTP adapter, Docker, the real CLI) on a chat whose workspace holds
// 20,000 files and about 500 MB, each turn rewriting ten files, with
// checkpoints on and off in two stacks side by side, turns interleaved.
// "answer" is what the client waits for; "settled" adds what the turn
// costs after its answer (the checkpoint) until the next turn can start.
//
//	CI=true go test -run '^$' -bench BenchmarkTurnWithCheckpoints -benchtime 10x ./middleware/
func BenchmarkTurnWithCheckpoints(b *testing.B) {
	tree := b.TempDir()
	for i := range 20_000 {
		p := filepath.Join(tree, fmt.Sprintf("pkg%d/mod%d/f%d.txt", i/2000, i/100, i))
		if i%100 == 0 {
			require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
		}
		size := 500 + i%8000
		if i%400 == 399 {
			size = 8 << 20 // 50 files of 8 MiB: about 500 MB in all
		}
		require.NoError(b, os.WriteFile(p, make([]byte, size), 0o644))
	}
	type side struct {
		name            string
		env             *checkpointE2E
		answer, settled []time.Duration
	}
	sides := []*side{{name: "on"}, {name: "off"}}
	for _, s := range sides {
		off := s.name == "off"
		s.env = newCheckpointE2E(b, 0, func(a *middleware.Assistant) { a.Sandbox.Checkpoints.Off = off })
		layout, err := executor.OpenWorkspaceLayout(s.env.data)
		require.NoError(b, err)
		ws, err := layout.Prepare("alice", "bench", 100000, 100000)
		require.NoError(b, err)
		out, err := exec.Command("cp", "-a", tree+"/.", ws).CombinedOutput()
		require.NoError(b, err, "%s", out)
		out, err = exec.Command("chown", "-R", "100000:100000", ws).CombinedOutput() // the sandbox user's, as the agent's files are
		require.NoError(b, err, "%s", out)
		s.env.ask(b, "bench", "Warm-up. CMD: ls | wc -l") // the start checkpoint, the image's page cache
	}
	turn := func(s *side, i int) {
		msg := fmt.Sprintf("Turn %d. CMD: for k in 0 1 2 3 4 5 6 7 8 9; do echo %d > pkg$k/mod$((k*10))/f$((k*1000)).txt; done; echo ok", i, i)
		t0 := time.Now()
		_, err := s.env.client.Chat.Completions.New(context.Background(), sdk.ChatCompletionNewParams{
			Model: "coder", User: sdk.String("alice:bench"), Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(msg)}})
		require.NoError(b, err)
		s.answer = append(s.answer, time.Since(t0))
		require.NoError(b, s.env.o.Settle(context.Background()))
		s.settled = append(s.settled, time.Since(t0))
	}
	b.ResetTimer()
	for i := range b.N {
		// Interleaved, the order alternating, so that load on the machine
		// falls on both alike.
		if i%2 == 0 {
			turn(sides[0], i)
			turn(sides[1], i)
		} else {
			turn(sides[1], i)
			turn(sides[0], i)
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	on, off := sides[0], sides[1]
	b.ReportMetric(p50(on.answer), "on-answer-ms")
	b.ReportMetric(p50(off.answer), "off-answer-ms")
	b.ReportMetric(p50(on.settled), "on-settled-ms")
	b.ReportMetric(p50(off.settled), "off-settled-ms")
	b.ReportMetric(p50(on.answer)/p50(off.answer), "answer-x")
	b.ReportMetric(p50(on.settled)/p50(off.settled), "settled-x")
	b.ReportMetric(0, "ns/op")
}
