package checkpoint_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
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
		var newBytes int64
		times := turns(b, ws, 0, func(int) {
			m, err := s.Take(ctx, ws, "turn")
			require.NoError(b, err)
			newBytes += m.NewBytes
		})
		report(b, times)
		b.ReportMetric(float64(newBytes)/float64(len(times))/float64(base.Bytes)*100, "%new/op")
	})
	b.Run("restore-10-changed", func(b *testing.B) {
		before, err := s.Take(ctx, ws, "before")
		require.NoError(b, err)
		times := turns(b, ws, 100, func(int) {
			_, err := s.Restore(ctx, ws, before.ID)
			require.NoError(b, err)
		})
		report(b, times)
	})
	b.Run("restore-all", func(b *testing.B) {
		var ours, cp []time.Duration
		for b.Loop() {
			empty := emptyWorkspace(b)
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

// turns runs b's loop: a turn that rewrites ten files (round counts from
// first), untimed, then op, timed; it returns op's times, and reports the
// process's CPU time (user and system, all threads) per op, a figure a
// loaded machine moves less than the wall time.
func turns(b *testing.B, ws string, first int, op func(round int)) []time.Duration {
	b.Helper()
	var times []time.Duration
	var cpu time.Duration
	round := first
	for b.Loop() {
		b.StopTimer()
		round++
		touch10(b, ws, round)
		b.StartTimer()
		c0 := cpuTime(b)
		t0 := time.Now()
		op(round)
		times = append(times, time.Since(t0))
		cpu += cpuTime(b) - c0
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(times)), "cpu-ms/op")
	return times
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// emptyWorkspace makes an empty directory to restore into, with b's
// timer stopped.
func emptyWorkspace(b *testing.B) string {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	empty := filepath.Join(b.TempDir(), "ws")
	require.NoError(b, os.Mkdir(empty, 0o755))
	return empty
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(b *testing.B, d []time.Duration) {
	b.ReportMetric(float64(p50(d).Microseconds())/1000, "p50-ms")
}

// BenchmarkMechanisms measures the mechanisms issue 34 weighed against
// this store, on BenchmarkCheckpoint's workspace and turns: a shadow Git
// repository (the git binary: `git add -A && git commit` into a repository
// outside the workspace, `git reset --hard` and `git clean` to restore)
// and tar with a manifest (GNU tar's --listed-incremental snapshot file:
// a level per turn; a restore extracts the archive). Run it with
//
//	go test -run '^$' -bench 'Checkpoint|Mechanisms' -benchtime 10x ./executor/checkpoint/
//
// and compare with BenchmarkCheckpoint's figures of the same run.
func BenchmarkMechanisms(b *testing.B) {
	ws := b.TempDir()
	benchWorkspace(b, ws, 20_000)
	var total int64
	require.NoError(b, filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := d.Info()
			total += fi.Size()
		}
		return err
	}))

	b.Run("git", func(b *testing.B) {
		if _, err := exec.LookPath("git"); err != nil {
			b.Skip("no git binary")
		}
		gitDir := filepath.Join(b.TempDir(), "shadow.git")
		git := func(args ...string) {
			// No automatic gc: it would run detached, during the next turn.
			cmd := exec.Command("git", append([]string{"-c", "gc.auto=0", "--git-dir", gitDir, "--work-tree", ws}, args...)...)
			cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a")
			out, err := cmd.CombinedOutput()
			require.NoError(b, err, "git %v: %s", args, out)
		}
		require.NoError(b, exec.Command("git", "init", "-q", "--bare", gitDir).Run())
		t0 := time.Now()
		git("add", "-A")
		git("commit", "-q", "-m", "base")
		b.Logf("git: first commit of the workspace %v", time.Since(t0))
		b.Run("take-10-changed", func(b *testing.B) {
			before := dirBytes(b, gitDir)
			times := turns(b, ws, 1000, func(int) {
				git("add", "-A")
				git("commit", "-q", "-m", "turn")
			})
			report(b, times)
			b.ReportMetric(float64(dirBytes(b, gitDir)-before)/float64(len(times))/float64(total)*100, "%new/op")
		})
		b.Run("restore-10-changed", func(b *testing.B) {
			git("add", "-A")
			git("commit", "-q", "--allow-empty", "-m", "before")
			times := turns(b, ws, 2000, func(int) {
				git("reset", "-q", "--hard", "HEAD")
				git("clean", "-q", "-fdx")
			})
			report(b, times)
		})
	})

	b.Run("tar", func(b *testing.B) {
		if _, err := exec.LookPath("tar"); err != nil {
			b.Skip("no tar binary")
		}
		dir := b.TempDir()
		snar := filepath.Join(dir, "manifest.snar")
		tarc := func(name string) {
			out, err := exec.Command("tar", "--listed-incremental", snar, "-cf", filepath.Join(dir, name), "-C", ws, ".").CombinedOutput()
			require.NoError(b, err, "tar: %s", out)
		}
		t0 := time.Now()
		tarc("level0.tar")
		b.Logf("tar: level 0 of the workspace %v", time.Since(t0))
		b.Run("take-10-changed", func(b *testing.B) {
			var names []string
			times := turns(b, ws, 3000, func(round int) {
				names = append(names, fmt.Sprintf("level%d.tar", round))
				tarc(names[len(names)-1])
			})
			var newBytes int64
			for _, name := range names {
				fi, err := os.Stat(filepath.Join(dir, name))
				require.NoError(b, err)
				newBytes += fi.Size()
			}
			report(b, times)
			b.ReportMetric(float64(newBytes)/float64(len(times))/float64(total)*100, "%new/op")
		})
		// A level's archive holds only what changed: going back to it,
		// even ten files away, means extracting level 0 and every level
		// up to it, so a restore costs the whole tree.
		b.Run("restore-all", func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				empty := emptyWorkspace(b)
				t0 := time.Now()
				out, err := exec.Command("tar", "--listed-incremental", "/dev/null", "-xf", filepath.Join(dir, "level0.tar"), "-C", empty).CombinedOutput()
				times = append(times, time.Since(t0))
				require.NoError(b, err, "tar: %s", out)
			}
			report(b, times)
		})
	})
}

// dirBytes is the disk space the files below dir take.
func dirBytes(b *testing.B, dir string) int64 {
	b.Helper()
	n, err := blocksBelow(dir, false)
	require.NoError(b, err)
	return n
}
