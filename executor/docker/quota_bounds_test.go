package docker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// fallocateSource calls fallocate(2) with the mode, file and length of its
// arguments: what busybox's fallocate cannot (FALLOC_FL_KEEP_SIZE), as any
// program the agent writes can.
const fallocateSource = `package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func main() {
	mode, _ := strconv.ParseUint(os.Args[1], 0, 32)
	n, _ := strconv.ParseInt(os.Args[3], 0, 64)
	f, err := os.OpenFile(os.Args[2], os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		err = syscall.Fallocate(int(f.Fd()), uint32(mode), 0, n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fallocate:", err)
		os.Exit(1)
	}
}
`

// buildStatic compiles the Go program source, one file of package main,
// into a static Linux binary named name for the container.
func buildStatic(t *testing.T, name, source string) []byte {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "go test runs with the go tool on PATH")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(source), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+name+"\n\ngo 1.25\n"), 0o600))
	cmd := exec.Command(goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", name, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return b
}

// TestQuotaBounds: what an agent's shell puts past max_disk and
// max_inodes in each quota mode, with the executor's defaults otherwise:
// fallocate of 8 GiB (busybox's, mode 0, and FALLOC_FL_KEEP_SIZE from a
// program the agent wrote, 1.3 MiB in the workspace), one dd of 3 GiB, the
// same after raising the file size limit, dd into file after file and a
// shell loop creating empty files. The figures are logged (bytes and files past the
// quota, how long the command ran); the assertions are the modes' stated
// bounds:
//
//   - loop: nothing past either quota (the kernel's ENOSPC);
//   - default (the watchdog): no file past max_disk (RLIMIT_FSIZE, the
//     fallocate filter), so fallocate and one dd add at most max_disk;
//     what many files put past the quota is what the agent writes between
//     two measurements, bounded here by the quota itself. The watchdog of
//     a fixed 2 s let fallocate allocate 8 GiB, dd write 3 GiB against
//     2 GiB and 235,771 files land against 200,000.
func TestQuotaBounds(t *testing.T) {
	const disk, inodes = 64 << 20, 5000
	fallocate := buildStatic(t, "fallocate", fallocateSource)
	type attack struct {
		script string
		// added bounds what the attack may add to the workspace under the
		// watchdog (the kernel's per-file limits); 0: the watchdog's
		// overshoot, bounded by the quota.
		added int64
	}
	attacks := []struct {
		name string
		attack
	}{
		{"fallocate_8g", attack{script: "fallocate -l 8G /workspace/big", added: 64 << 10}},
		{"fallocate_keep_size_8g", attack{script: ": > /workspace/big && /workspace/fallocate 1 /workspace/big 8589934592", added: 64 << 10}},
		{"dd_3g", attack{script: "dd if=/dev/zero of=/workspace/big bs=1M count=3072", added: disk + 64<<10}},
		{"ulimit_raise", attack{script: "ulimit -f unlimited && dd if=/dev/zero of=/workspace/big bs=1M count=3072", added: 64 << 10}},
		{"dd_files", attack{script: "i=0; while [ $i -lt 64 ] && dd if=/dev/zero of=/workspace/f$i bs=1M count=16 2>/dev/null; do i=$((i+1)); done; [ $i -ge 64 ]"}},
		{"file_loop", attack{script: "mkdir /workspace/flood && cd /workspace/flood && i=0; while [ $i -lt 100000 ] && true > f$i; do i=$((i+1)); done; [ $i -ge 100000 ]"}},
	}
	for _, m := range []struct {
		name   string
		mode   QuotaMode
		helper bool // commands through the helper, as in production, not docker exec
	}{
		{"default", QuotaAuto, false},
		{"default_helper", QuotaAuto, true},
		{"loop", QuotaLoop, false},
	} {
		name, mode := m.name, m.mode
		t.Run(name, func(t *testing.T) {
			if mode == QuotaLoop {
				testenv.RequireRoot(t, "loop-mounted workspace images")
			}
			e := newTestExecutor(t, func(o *Options) {
				o.Quota = mode
				if m.helper {
					o.HelperBinary = testenv.HelperBinary(t)
				}
			})
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					chat := strings.ReplaceAll(name+"-"+a.name, "_", "-")
					spec := testSpec(chat)
					spec.DiskBytes, spec.Inodes = disk, inodes
					sb := create(t, e, spec)
					require.NoError(t, sb.WriteFile(context.Background(), "fallocate", fallocate))
					mustRun(t, sb, "chmod 755 /workspace/fallocate") // /tmp is noexec
					ws := e.layout.Dir("u1", chat)
					b0, _, err := executor.MeasureDir(ws, math.MaxInt64, math.MaxInt64)
					require.NoError(t, err)
					start := time.Now()
					_, stderr, res, err := run(t, sb, a.script, func(c *executor.Cmd) { c.Timeout = 5 * time.Minute })
					took := time.Since(start)
					b, n, merr := executor.MeasureDir(ws, math.MaxInt64, math.MaxInt64)
					require.NoError(t, merr)
					t.Logf("%s %s: %d bytes past max_disk %d (%.1f MiB), %d files past max_inodes %d, command ran %v (exit %d, err %v); stderr %.160q",
						name, a.name, b-disk, int64(disk), float64(b-disk)/(1<<20), n-inodes, inodes, took.Round(time.Millisecond), res.ExitCode, err, stderr)
					if err == nil {
						assert.NotZero(t, res.ExitCode, "the attack fails")
					} else {
						require.ErrorIs(t, err, executor.ErrNoSpace, "the watchdog stopped it")
					}
					switch {
					case mode == QuotaLoop:
						assert.LessOrEqual(t, b, int64(disk), "bytes past max_disk")
						assert.LessOrEqual(t, n, int64(inodes), "files past max_inodes")
						return
					case a.added > 0:
						assert.LessOrEqual(t, b-b0, a.added, "bytes the attack added (its file is at most max_disk)")
						return
					}
					assert.LessOrEqual(t, b-disk, int64(disk), "bytes past max_disk: the watchdog's overshoot")
					assert.LessOrEqual(t, n-inodes, int64(inodes), "files past max_inodes: the watchdog's overshoot")
				})
			}
		})
	}
}

func TestNextPause(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const disk, inodes = 1000, 100
	for name, tc := range map[string]struct {
		prev, cur quotaSample
		max       time.Duration
		want      time.Duration
	}{
		"first, small":   {cur: quotaSample{at: t0, walk: time.Millisecond}, max: 2 * time.Second, want: idleQuotaPause},
		"first, large":   {cur: quotaSample{at: t0, walk: 50 * time.Millisecond}, max: 2 * time.Second, want: time.Second},
		"capped":         {cur: quotaSample{at: t0, walk: time.Second}, max: 2 * time.Second, want: 2 * time.Second},
		"slow walk":      {cur: quotaSample{at: t0, walk: 3 * time.Second}, max: 2 * time.Second, want: 2 * time.Second},
		"interval short": {cur: quotaSample{at: t0}, max: time.Millisecond, want: minQuotaPause},
		"idle":           {prev: quotaSample{at: t0, bytes: 500}, cur: quotaSample{at: at(time.Second), bytes: 500}, max: 2 * time.Second, want: idleQuotaPause},
		// 100 bytes a second, 300 left: three seconds, a third of it.
		"growing bytes": {prev: quotaSample{at: t0, bytes: 600}, cur: quotaSample{at: at(time.Second), bytes: 700, walk: 100 * time.Millisecond}, max: 2 * time.Second, want: time.Second},
		// 10 files in 10 s, 30 left: 30 s, a third is 10 s, capped at 2 s.
		"growing slowly": {prev: quotaSample{at: t0, inodes: 60}, cur: quotaSample{at: at(10 * time.Second), inodes: 70, walk: 20 * time.Millisecond}, max: 2 * time.Second, want: 400 * time.Millisecond},
		"near, floor":    {prev: quotaSample{at: t0, inodes: 10}, cur: quotaSample{at: at(time.Second), inodes: 99}, max: 2 * time.Second, want: minQuotaPause},
		"near, walk":     {prev: quotaSample{at: t0, inodes: 10}, cur: quotaSample{at: at(time.Second), inodes: 99, walk: 30 * time.Millisecond}, max: 2 * time.Second, want: 60 * time.Millisecond},
		"shrinking":      {prev: quotaSample{at: t0, bytes: 900}, cur: quotaSample{at: at(time.Second), bytes: 100}, max: 2 * time.Second, want: idleQuotaPause},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, nextPause(tc.prev, tc.cur, disk, inodes, tc.max))
		})
	}
}

func TestGrewTowardQuota(t *testing.T) {
	const disk, inodes = 1000, 100
	last := quotaSample{bytes: 400, inodes: 40, fs: fsUsage{bytes: 1 << 20, inodes: 5000}}
	for name, tc := range map[string]struct {
		now  fsUsage
		want bool
	}{
		"no change":           {now: last.fs, want: false},
		"a third of 600":      {now: fsUsage{bytes: 1<<20 + 200, inodes: 5000}, want: true},
		"less":                {now: fsUsage{bytes: 1<<20 + 199, inodes: 5000}, want: false},
		"a third of 60 files": {now: fsUsage{bytes: 1 << 20, inodes: 5020}, want: true},
		"files freed":         {now: fsUsage{bytes: 1 << 20, inodes: 4000}, want: false},
		"bytes freed":         {now: fsUsage{bytes: 1000, inodes: 5000}, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, grewTowardQuota(last, tc.now, disk, inodes))
		})
	}
}

func TestOverByEstimate(t *testing.T) {
	const disk, inodes = 1000, 100
	last := quotaSample{bytes: 400, inodes: 40, fs: fsUsage{bytes: 1 << 20, inodes: 5000}}
	for name, tc := range map[string]struct {
		now  fsUsage
		want bool
	}{
		"no change":        {now: last.fs, want: false},
		"bytes to quota":   {now: fsUsage{bytes: 1<<20 + 600, inodes: 5000}, want: false},
		"bytes past quota": {now: fsUsage{bytes: 1<<20 + 601, inodes: 5000}, want: true},
		"files to quota":   {now: fsUsage{bytes: 1 << 20, inodes: 5060}, want: false},
		"files past quota": {now: fsUsage{bytes: 1 << 20, inodes: 5061}, want: true},
		"freed elsewhere":  {now: fsUsage{bytes: 1 << 19, inodes: 4000}, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, overByEstimate(last, tc.now, disk, inodes))
		})
	}
}

// TestQuotaSeccompProfile: fallocate is allowed only by the rule that
// checks its mode; every other syscall keeps Docker's default.
func TestQuotaSeccompProfile(t *testing.T) {
	p := quotaSeccompProfile()
	var rules int
	for _, s := range p.Syscalls {
		for _, n := range s.Names {
			if n != "fallocate" {
				continue
			}
			rules++
			require.Len(t, s.Args, 1)
			assert.Equal(t, uint(1), s.Args[0].Index, "the mode")
			assert.Equal(t, uint64(0xffffffef), s.Args[0].Value, "every bit but FALLOC_FL_ZERO_RANGE")
			assert.Zero(t, s.Args[0].ValueTwo)
		}
	}
	assert.Equal(t, 1, rules)
	assert.Contains(t, sandboxSeccomp(), `"fallocate"`)
}

// BenchmarkQuotaOvershoot measures the default mode's overshoot at the
// default quota (2 GiB, 200,000 files), the scale of issue 32, where a
// walk of the workspace takes most of a second:
//
//	go test -run '^$' -bench QuotaOvershoot -benchtime 1x ./executor/docker/
func BenchmarkQuotaOvershoot(b *testing.B) {
	e := newTestExecutor(b)
	for _, a := range []struct{ name, script string }{
		{"dd_files", "i=0; while [ $i -lt 40 ] && dd if=/dev/zero of=/workspace/f$i bs=1M count=256 2>/dev/null; do i=$((i+1)); done"},
		{"file_loop", "mkdir /workspace/flood && cd /workspace/flood && i=0; while [ $i -lt 400000 ] && true > f$i; do i=$((i+1)); done"},
	} {
		b.Run(a.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n++
				chat := fmt.Sprintf("overshoot-%s-%d", strings.ReplaceAll(a.name, "_", "-"), n)
				spec := testSpec(chat)
				spec.Timeout = 20 * time.Minute
				sb, err := e.Create(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				_, _, _, err = run(b, sb, a.script, func(c *executor.Cmd) { c.Timeout = 15 * time.Minute })
				if !errors.Is(err, executor.ErrNoSpace) {
					b.Fatalf("the watchdog did not stop the run: %v", err)
				}
				bytes, files, err := executor.MeasureDir(e.layout.Dir("u1", chat), math.MaxInt64, math.MaxInt64)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(bytes-executor.DefaultDiskBytes)/(1<<20), "MiB-past")
				b.ReportMetric(float64(files-executor.DefaultInodes), "files-past")
				_ = sb.Close(context.Background())
			}
		})
	}
}
