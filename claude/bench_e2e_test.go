package claude_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
)

// BenchmarkRunOverhead measures one plain run in a real container and
// reports, per run, the CLI's own wall time (its exec from process start to
// exit, and the duration_ms it reports for the query alone) beside what
// agentbox adds around it: container start until the helper answers,
// parsing, and teardown (overhead-ms is their sum). The cli_version
// sub-benchmark is the baseline of the CLI's bare start-up: `claude
// --version` through the same helper exec. Run with -benchtime=5x; it needs
// Docker and the sandbox image.
func BenchmarkRunOverhead(b *testing.B) {
	env := newE2E(b)
	api := scriptedapi.Start(scriptedapi.WithScript(func(*scriptedapi.Request) scriptedapi.Turn { return scriptedapi.Say("1+1 is 2.") }))
	defer api.Close()
	var create, exec, cli, parse, teardown time.Duration
	n := 0
	b.Run("full_run", func(b *testing.B) {
		for b.Loop() {
			run := env.run(b, fmt.Sprintf("bench%d", n), api, executor.RunRequest{Messages: user("What is 1+1?")}, e2eOpts{})
			n++
			if run.err != nil || run.comp.IsError {
				b.Fatalf("run failed: %v %v", run.err, run.comp.Errors)
			}
			create += run.create
			exec += run.wall
			cli += run.comp.Duration
			teardown += run.close
			t0 := time.Now()
			if _, err := claude.New().Parse(context.Background(), bytes.NewReader(run.stdout), func(executor.Event) error { return nil }); err != nil {
				b.Fatal(err)
			}
			parse += time.Since(t0)
		}
		runs := float64(n)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / runs }
		b.ReportMetric(ms(cli), "cli-own-ms/run")
		b.ReportMetric(ms(exec), "cli-exec-ms/run")
		b.ReportMetric(ms(create), "start-ms/run")
		b.ReportMetric(ms(teardown), "teardown-ms/run")
		b.ReportMetric(float64(parse.Microseconds())/runs, "parse-µs/run")
		b.ReportMetric(ms(create+teardown)+float64(parse.Microseconds())/1000/runs, "overhead-ms/run")
	})
	b.Run("cli_version", func(b *testing.B) {
		sb, err := env.e.Create(context.Background(), executor.Spec{
			UserID: "u1", ChatID: "benchversion", MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Timeout: 5 * time.Minute, Network: "none", Runtime: env.runtime,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = sb.Close(context.Background()) }()
		for b.Loop() {
			var out bytes.Buffer
			res, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"claude", "--version"}, Stdout: &out, Timeout: time.Minute})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("claude --version: %v %d %s", err, res.ExitCode, out.String())
			}
		}
	})
}
