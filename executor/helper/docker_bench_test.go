package helper

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// reportP50 records each iteration's duration and reports the median, in
// milliseconds, as the p50-ms metric (and p90-ms).
func reportP50(b *testing.B, run func()) {
	b.Helper()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		run()
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*9/10].Microseconds())/1000, "p90-ms")
}

// medianMS is the median of ds in milliseconds.
func medianMS(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

// BenchmarkExec compares, in one run, a local os/exec of `true` (baseline),
// the same command through the helper in a container, and through
// `docker exec` on the same container.
// Target: helper p50 within 2x of local.
func BenchmarkExec(b *testing.B) {
	sb := startSandbox(b, sandboxOpts{})
	b.Run("local-os-exec", func(b *testing.B) {
		reportP50(b, func() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("helper", func(b *testing.B) {
		ctx := context.Background()
		reportP50(b, func() {
			res, err := sb.client.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		})
	})
	b.Run("docker-exec", func(b *testing.B) {
		reportP50(b, func() {
			if out, err := exec.Command("docker", "exec", sb.id, "true").CombinedOutput(); err != nil {
				b.Fatal(string(out), err)
			}
		})
	})
}

// BenchmarkCreateToReady measures `docker run` until the sandbox can run a
// command: with the helper (WaitReady answers on exec.sock) against the
// Docker-exec way (a sleeping main process, polled with `docker exec true`).
func BenchmarkCreateToReady(b *testing.B) {
	image := testenv.RequireImage(b)
	b.Run("helper", func(b *testing.B) {
		var afterRun []time.Duration
		defer func() { b.ReportMetric(medianMS(afterRun), "ready-after-run-p50-ms") }()
		reportP50(b, func() {
			b.StopTimer()
			hostDir, work := sandboxDirs(b)
			args := dockerRunArgs(b, image, hostDir, work, sandboxOpts{})
			b.StartTimer()
			out, err := exec.Command("docker", args...).CombinedOutput()
			require.NoError(b, err, "%s", out)
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c, err := WaitReady(ctx, hostDir)
			cancel()
			require.NoError(b, err)
			afterRun = append(afterRun, time.Since(t0))
			b.StopTimer()
			_ = c.Close()
			_ = exec.Command("docker", "rm", "-f", strings.TrimSpace(string(out))).Run()
			b.StartTimer()
		})
	})
	b.Run("docker-exec", func(b *testing.B) {
		var afterRun []time.Duration
		defer func() { b.ReportMetric(medianMS(afterRun), "ready-after-run-p50-ms") }()
		reportP50(b, func() {
			b.StopTimer()
			hostDir, work := sandboxDirs(b)
			args := dockerRunArgs(b, image, hostDir, work, sandboxOpts{})
			// Same container, but the main process only sleeps; readiness is
			// the first `docker exec` that succeeds.
			i := slices.Index(args, "--entrypoint")
			args[i+1] = "/bin/sleep"
			args = append(args[:slices.Index(args, image)+1], "100000")
			b.StartTimer()
			out, err := exec.Command("docker", args...).CombinedOutput()
			require.NoError(b, err, "%s", out)
			id := strings.TrimSpace(string(out))
			t0 := time.Now()
			deadline := t0.Add(30 * time.Second)
			for exec.Command("docker", "exec", id, "true").Run() != nil {
				require.True(b, time.Now().Before(deadline), "docker exec never succeeded")
			}
			afterRun = append(afterRun, time.Since(t0))
			b.StopTimer()
			_ = exec.Command("docker", "rm", "-f", id).Run()
			b.StartTimer()
		})
	})
}
