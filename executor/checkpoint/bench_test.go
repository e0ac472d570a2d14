package checkpoint_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/checkpoint"
)

// benchWorkspace makes the workspace under dir: files in 200
// directories, with every 400th 8 MiB, to about size bytes in all.
func benchWorkspace(b *testing.B, dir string, files int) {
	b.Helper()
	buf := make([]byte, 8<<20+1024)
	_, _ = rand.Read(buf)
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("pkg%d/mod%d/f%d.txt", i/2000, i/100, i))
		if i%100 == 0 {
			require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
		}
		size := 500 + i%8000
		if i%400 == 399 {
			size = 8 << 20
		}
		require.NoError(b, os.WriteFile(p, buf[i%1000:i%1000+size], 0o644))
	}
}

// touch10 rewrites ten files of benchWorkspace's, as a turn would.
func touch10(b *testing.B, dir string, round int) {
	b.Helper()
	for k := range 10 {
		i := k*997 + round%7
		p := filepath.Join(dir, fmt.Sprintf("pkg%d/mod%d/f%d.txt", i/2000, i/100, i))
		require.NoError(b, os.WriteFile(p, fmt.Appendf(nil, "round %d file %d\n", round, k), 0o644))
	}
}

// BenchmarkCheckpoint is the figures on a workspace of 20,000
// files and about 500 MB: a checkpoint after a turn that changed ten
// files, and its new storage; restoring a checkpoint ten files away; and
// restoring all of it into an empty workspace beside `cp -a` of the same
// tree, measured in the same run.
func BenchmarkCheckpoint(b *testing.B) {
	ctx := context.Background()
	ws := b.TempDir()
	benchWorkspace(b, ws, 20_000)
	s, err := checkpoint.Open(filepath.Join(b.TempDir(), "store"), checkpoint.Options{UID: -1, GID: -1})
	require.NoError(b, err)
	base, err := s.Take(ctx, ws, "base")
	require.NoError(b, err)
	b.Logf("workspace: %d files, %d MB", base.Files, base.Bytes>>20)

	b.Run("take-10-changed", func(b *testing.B) {
		var times []time.Duration
		var newBytes int64
		round := 0
		for b.Loop() {
			b.StopTimer()
			round++
			touch10(b, ws, round)
			b.StartTimer()
			t0 := time.Now()
			m, err := s.Take(ctx, ws, "turn")
			times = append(times, time.Since(t0))
			require.NoError(b, err)
			newBytes += m.NewBytes
		}
		report(b, times)
		b.ReportMetric(float64(newBytes)/float64(len(times))/float64(base.Bytes)*100, "%new/op")
	})
	b.Run("restore-10-changed", func(b *testing.B) {
		before, err := s.Take(ctx, ws, "before")
		require.NoError(b, err)
		var times []time.Duration
		round := 100
		for b.Loop() {
			b.StopTimer()
			round++
			touch10(b, ws, round)
			b.StartTimer()
			t0 := time.Now()
			_, err := s.Restore(ctx, ws, before.ID)
			times = append(times, time.Since(t0))
			require.NoError(b, err)
		}
		report(b, times)
	})
	b.Run("restore-all", func(b *testing.B) {
		var ours, cp []time.Duration
		for b.Loop() {
			b.StopTimer()
			empty := filepath.Join(b.TempDir(), "ws")
			require.NoError(b, os.Mkdir(empty, 0o755))
			b.StartTimer()
			t0 := time.Now()
			_, err := s.Restore(ctx, empty, base.ID)
			ours = append(ours, time.Since(t0))
			require.NoError(b, err)
			b.StopTimer()
			dst := filepath.Join(b.TempDir(), "cp")
			t0 = time.Now()
			require.NoError(b, exec.Command("cp", "-a", ws, dst).Run())
			cp = append(cp, time.Since(t0))
			b.StartTimer()
		}
		report(b, ours)
		b.ReportMetric(float64(p50(cp).Microseconds())/1000, "cp-a-p50-ms")
		b.ReportMetric(float64(p50(ours))/float64(p50(cp)), "x-cp-a")
	})
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(b *testing.B, d []time.Duration) {
	b.ReportMetric(float64(p50(d).Microseconds())/1000, "p50-ms")
}
