package docker

import (
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestBaselineInspect checks every item of the container baseline in the
// daemon's own view of a running sandbox.
func TestBaselineInspect(t *testing.T) {
	e := newTestExecutor(t)
	spec := testSpec("baseline")
	sb := create(t, e, spec)
	ins, err := e.api.ContainerInspect(context.Background(), sb.ID())
	require.NoError(t, err)
	require.NotNil(t, ins.State)
	assert.True(t, ins.State.Running)

	cfg, hc := ins.Config, ins.HostConfig
	assert.Equal(t, executor.DefaultUser, cfg.User, "non-root user, no host account")
	require.NotNil(t, hc.Init)
	assert.True(t, *hc.Init, "init")
	assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop), "cap-drop ALL")
	assert.Empty(t, hc.CapAdd)
	assert.Contains(t, hc.SecurityOpt, "no-new-privileges")
	assert.True(t, hc.ReadonlyRootfs, "read-only rootfs")
	assert.Contains(t, hc.Tmpfs, "/tmp")
	assert.Contains(t, hc.Tmpfs, DefaultHome)
	assert.Contains(t, hc.Tmpfs["/tmp"], "size=")
	assert.Contains(t, hc.Tmpfs[DefaultHome], "uid="+strings.Split(executor.DefaultUser, ":")[0]+",")
	assert.Equal(t, spec.MemoryBytes, hc.Memory)
	assert.Equal(t, hc.Memory, hc.MemorySwap, "memory == memory+swap: no swap")
	require.NotNil(t, hc.PidsLimit)
	assert.Equal(t, spec.PidsLimit, *hc.PidsLimit)
	assert.Equal(t, int64(spec.CPUs*1e9), hc.NanoCPUs)
	require.Len(t, hc.Ulimits, 2)
	assert.Equal(t, "nofile", hc.Ulimits[0].Name)
	assert.Equal(t, "fsize", hc.Ulimits[1].Name, "no file past the disk quota")
	assert.Equal(t, executor.DefaultDiskBytes, hc.Ulimits[1].Hard)
	assert.Contains(t, strings.Join(hc.SecurityOpt, " "), "seccomp=", "Docker's default profile less fallocate past a file's size")
	assert.Equal(t, "none", string(hc.NetworkMode))
	assert.Equal(t, "none", hc.LogConfig.Type, "log driver none")
	assert.Empty(t, ins.LogPath, "no log file on the daemon's disk")
	assert.False(t, hc.Privileged)
	assert.False(t, hc.PidMode.IsHost(), "pid namespace")
	assert.False(t, hc.IpcMode.IsHost(), "ipc namespace")
	assert.False(t, hc.UTSMode.IsHost(), "uts namespace")
	assert.False(t, hc.NetworkMode.IsHost(), "network namespace")
	assert.False(t, hc.UsernsMode.IsHost(), "user namespace")
	assert.Empty(t, hc.Devices, "no devices")
	assert.Empty(t, hc.Binds, "structured mounts only")
	assert.True(t, hc.AutoRemove)
	for _, m := range ins.Mounts {
		assert.NotContains(t, m.Source, "docker.sock", "no docker socket")
	}
	var targets []string
	for _, m := range hc.Mounts {
		targets = append(targets, m.Target)
	}
	assert.ElementsMatch(t, []string{executor.ContainerWorkdir, ContainerHostDir}, targets)
	for _, k := range []string{LabelManagedBy, LabelInstance, LabelUser, LabelChat, LabelAssistant, LabelConfigHash, LabelCreatedAt, LabelDeadline} {
		assert.Contains(t, cfg.Labels, k)
	}
	assert.Equal(t, "baseline", cfg.Labels[LabelChat])

	// And from inside: the rootfs refuses writes, /tmp and HOME take them,
	// no capabilities, no network but loopback.
	out := mustRun(t, sb, `touch /etc/x 2>/dev/null && echo rootfs-writable; touch /tmp/x $HOME/x && echo tmpfs-ok; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; ls /sys/class/net`)
	assert.NotContains(t, out, "rootfs-writable")
	assert.Contains(t, out, "tmpfs-ok")
	assert.Contains(t, out, "CapEff:\t0000000000000000")
	assert.Contains(t, out, "NoNewPrivs:\t1")
	assert.Equal(t, "lo", strings.TrimSpace(out[strings.LastIndex(out, "\n")+1:]))
}

// execPaths runs a test on the docker-exec path, and on the helper path
// when a helper binary can be built.
func execPaths(t *testing.T, f func(t *testing.T, e *Executor)) {
	t.Run(PathDockerExec, func(t *testing.T) { f(t, newTestExecutor(t)) })
	t.Run(PathHelper, func(t *testing.T) {
		testenv.RequireImage(t)
		bin := testenv.HelperBinary(t)
		f(t, newTestExecutor(t, func(o *Options) { o.HelperBinary = bin }))
	})
}

// stopPaths is execPaths plus the docker-exec path with the kill script
// instead of the host-side kill, for tests that stop commands.
func stopPaths(t *testing.T, f func(t *testing.T, e *Executor)) {
	execPaths(t, f)
	t.Run(PathDockerExec+"/kill-script", func(t *testing.T) {
		// Stops go through the kill script in a second exec, the path of a
		// gateway that cannot see the daemon host's /proc.
		e := newTestExecutor(t)
		e.noHostKill = true
		f(t, e)
	})
}

// TestExecBasics covers argv, env, dir, stdin, both streams and exit codes.
func TestExecBasics(t *testing.T) {
	execPaths(t, func(t *testing.T, e *Executor) {
		sb := create(t, e, testSpec("basics"))
		var out, errb strings.Builder
		res, err := sb.Exec(context.Background(), &executor.Cmd{
			Args:   []string{"sh", "-c", `cat; echo "$FOO $(pwd)"; echo oops >&2; exit 3`, "x"},
			Env:    []string{"FOO=bar baz"},
			Dir:    "/tmp",
			Stdin:  strings.NewReader("from stdin\n"),
			Stdout: &out, Stderr: &errb,
		})
		require.NoError(t, err)
		assert.Equal(t, 3, res.ExitCode)
		assert.Equal(t, sb.ExecPath(), res.Path)
		assert.Equal(t, "from stdin\nbar baz /tmp\n", out.String())
		assert.Equal(t, "oops\n", errb.String())

		res, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "kill -9 $$"}})
		require.NoError(t, err)
		assert.Equal(t, -1, res.ExitCode)
		assert.Equal(t, "SIGKILL", res.Signal)

		_, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"pwd"}, Dir: "relative"})
		assert.ErrorIs(t, err, executor.ErrInvalid)
		_, err = sb.Exec(context.Background(), &executor.Cmd{})
		assert.ErrorIs(t, err, executor.ErrInvalid)
	})
}

// psOf lists the commands running in the sandbox.
func psOf(t *testing.T, sb *Sandbox) string {
	t.Helper()
	return mustRun(t, sb, "ps -o pid,args")
}

// TestExecStopLeavesNoProcess: a timed-out and a cancelled command, with
// children in the background, in another session and with a cleared
// environment, leave no process behind (checked with ps inside).
func TestExecStopLeavesNoProcess(t *testing.T) {
	stopPaths(t, func(t *testing.T, e *Executor) {
		sb := create(t, e, testSpec("stop"))
		script := `sleep 1001 & env -i sleep 1002 & setsid sleep 1003 & (sleep 1004 &); echo started; sleep 1005`
		_, _, _, err := run(t, sb, script, func(c *executor.Cmd) { c.Timeout = time.Second })
		assert.ErrorIs(t, err, executor.ErrTimeout)
		ps := psOf(t, sb)
		for i := 1001; i <= 1005; i++ {
			assert.NotContains(t, ps, "sleep "+strconv.Itoa(i), "after timeout")
		}

		ctx, cancel := context.WithCancel(context.Background())
		var out testenv.SyncBuffer
		done := make(chan error, 1)
		go func() {
			_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out})
			done <- err
		}()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "started") }, 20*time.Second, 5*time.Millisecond)
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(e.o.StopGrace + 15*time.Second):
			t.Fatal("cancelled exec did not return")
		}
		ps = psOf(t, sb)
		for i := 1001; i <= 1005; i++ {
			assert.NotContains(t, ps, "sleep "+strconv.Itoa(i), "after cancel")
		}
	})
}

// TestSIGTERMIgnoredGoneWithinGrace: a command that ignores SIGTERM is gone
// within its timeout plus the stop grace, plus what stopping it costs: on
// the kill script's path two execs (TERM, then KILL after the grace),
// each measured in the same run as a command's exec on this machine now
// (a loaded machine's exec takes seconds, and a fixed margin failed CI).
// Without the KILL the loop would run until the test's own timeout.
func TestSIGTERMIgnoredGoneWithinGrace(t *testing.T) {
	stopPaths(t, func(t *testing.T, e *Executor) {
		sb := create(t, e, testSpec("sigterm"))
		var execCost time.Duration
		for range 3 {
			t0 := time.Now()
			mustRun(t, sb, "true")
			execCost = max(execCost, time.Since(t0))
		}
		const timeout = time.Second
		start := time.Now()
		_, _, _, err := run(t, sb, `trap "" TERM; while :; do sleep 1; done`, func(c *executor.Cmd) { c.Timeout = timeout })
		took := time.Since(start)
		assert.ErrorIs(t, err, executor.ErrTimeout)
		limit := timeout + e.o.StopGrace + max(3*time.Second, 2*execCost+2*time.Second)
		assert.Less(t, took, limit, "an exec costs %v here", execCost)
		assert.NotContains(t, psOf(t, sb), "trap")
		t.Logf("timeout %v + grace %v: returned after %v (an exec %v, limit %v)", timeout, e.o.StopGrace, took, execCost, limit)
	})
}

// TestMemoryBombReportedAsOOM: a child eats memory until the OOM killer
// takes it; its parent exits 0, and the result still says OOMKilled.
func TestMemoryBombReportedAsOOM(t *testing.T) {
	execPaths(t, func(t *testing.T, e *Executor) {
		spec := testSpec("oom")
		spec.MemoryBytes = 64 << 20
		sb := create(t, e, spec)
		res, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "tail /dev/zero; exit 0"}, Timeout: time.Minute})
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.True(t, res.OOMKilled, "OOM kill reported")

		res, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
		require.NoError(t, err)
		assert.False(t, res.OOMKilled, "a later command is not blamed")
	})
}

// TestMemoryBombOOMCounterByExec forces the OOM counter read through exec
// inside the container, the path used when the gateway cannot see the
// daemon host's cgroup filesystem (remote daemon, gateway in a container).
func TestMemoryBombOOMCounterByExec(t *testing.T) {
	e := newTestExecutor(t)
	spec := testSpec("oom-exec")
	spec.MemoryBytes = 64 << 20
	sb := create(t, e, spec)
	sb.oom, sb.oomHost = execOOMCounter{d: sb.docker}, false
	n, err := sb.readOOM(context.Background())
	require.NoError(t, err, "the cgroup's oom_kill counter is readable from inside")
	assert.Zero(t, n)
	res, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "tail /dev/zero; exit 0"}, Timeout: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.True(t, res.OOMKilled)
	res, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
	require.NoError(t, err)
	assert.False(t, res.OOMKilled)
}

// TestForkBombStopsAtPidsLimit: a fork bomb hits the pids limit, the host
// stays responsive, and the command is stopped at its timeout.
func TestForkBombStopsAtPidsLimit(t *testing.T) {
	t.Run("host-kill", func(t *testing.T) {
		// Killed from the host: the sandbox survives its fork bomb.
		forkBomb(t, newTestExecutor(t), true)
	})
	t.Run("kill-script", func(t *testing.T) {
		// No exec can start at the pids limit: the sandbox is stopped.
		e := newTestExecutor(t)
		e.noHostKill = true
		forkBomb(t, e, false)
	})
}

func forkBomb(t *testing.T, e *Executor, survives bool) {
	spec := testSpec("forkbomb")
	spec.PidsLimit = 64
	sb := create(t, e, spec)
	pidsFile := hostCgroupPids(t, sb)

	// The host's responsiveness is the lag of a 10 ms ticker, compared with
	// the same measure just before the bomb (a loaded machine lags anyway).
	var maxLag atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	watchLag := func(stop <-chan struct{}) {
		defer wg.Done()
		last := time.Now()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				if lag := now.Sub(last) - 10*time.Millisecond; int64(lag) > maxLag.Load() {
					maxLag.Store(int64(lag))
				}
				last = now
			}
		}
	}
	stopBase := make(chan struct{})
	wg.Add(1)
	go watchLag(stopBase)
	time.Sleep(2 * time.Second)
	close(stopBase)
	wg.Wait()
	baseLag := time.Duration(maxLag.Swap(0))

	wg.Add(1)
	go watchLag(stop)
	var peak atomic.Int64
	if pidsFile != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if b, err := os.ReadFile(pidsFile); err == nil {
					if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > peak.Load() {
						peak.Store(n)
					}
				}
			}
		}()
	}
	const timeout = 3 * time.Second
	start := time.Now()
	// bash, not busybox ash: ash exits when fork fails, so its bomb dies out
	// by itself; bash retries and keeps the limit saturated.
	_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"bash", "-c", `f() { while :; do f & done; }; f 2>/dev/null`}, Timeout: timeout})
	took := time.Since(start)
	close(stop)
	wg.Wait()
	// What stopped it is its timeout, even when stopping it took the
	// container with it (the status of the exec is then lost).
	assert.ErrorIs(t, err, executor.ErrTimeout)
	// The bounds the code sets itself: the timeout, the kill script's
	// grace plus margin, a container kill and an exec inspect.
	assert.Less(t, took, timeout+e.o.StopGrace+5*time.Second+2*e.o.CallTimeout)
	lag := time.Duration(maxLag.Load())
	assert.Less(t, lag, 2*baseLag+time.Second, "host ticker lag during the bomb (before it: %v)", baseLag)
	if pidsFile != "" {
		// Each exec (the kill script's attempts) joins the cgroup by
		// migration, which pids.max does not refuse: a few over is expected.
		assert.LessOrEqual(t, peak.Load(), spec.PidsLimit+8)
		assert.Greater(t, peak.Load(), spec.PidsLimit/2, "the bomb reached the limit")
	}
	t.Logf("fork bomb: returned after %v, peak pids %d (limit %d), max host ticker lag %v (before %v), sandbox stopped %v, err %v",
		took, peak.Load(), spec.PidsLimit, lag, baseLag, sb.stopped.Load(), err)
	switch {
	case survives:
		assert.False(t, sb.stopped.Load(), "the host kill stops the bomb without stopping the sandbox")
		assert.NotContains(t, psOf(t, sb), "while :")
	case sb.stopped.Load():
		// The kill script could not start or finish at the pids limit:
		// the sandbox was stopped, and says so.
		assert.ErrorIs(t, err, executor.ErrNotRunning)
		assert.Contains(t, err.Error(), "could not be killed")
		_, _, _, err := run(t, sb, "true")
		assert.ErrorIs(t, err, executor.ErrNotRunning)
	default:
		// The kill script got a slot (its exec joins the cgroup by
		// migration) and killed the bomb with builtins: nothing is left.
		assert.NotContains(t, psOf(t, sb), "while :")
	}
}

// hostCgroupPids is the container's pids.current on this host, or "".
func hostCgroupPids(t *testing.T, sb *Sandbox) string {
	f, ok := sb.oom.(hostOOMCounter)
	if !ok {
		return ""
	}
	cg := strings.TrimSuffix(strings.TrimPrefix(f.file, "/sys/fs/cgroup/memory"), "/memory.oom_control")
	p := "/sys/fs/cgroup/pids" + cg + "/pids.current"
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// TestStdoutFloodHitsCap: an endless stdout hits the cap, the gateway's
// heap does not grow with it, and Docker keeps no log of it.
func TestStdoutFloodHitsCap(t *testing.T) {
	e := newTestExecutor(t)
	sb := create(t, e, testSpec("flood"))
	const limit = 64 << 20
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var n countingWriter
	res, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"yes", "flood"}, Stdout: &n, MaxOutput: limit})
	close(stop)
	<-sampled
	assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
	assert.Equal(t, int64(limit), n.n.Load(), "exactly the cap reached the caller")
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	assert.Less(t, growth, int64(16<<20), "heap growth while %d MiB streamed through", limit>>20)
	t.Logf("flood: %d MiB delivered, heap in use %d MiB before, peak %d MiB, exec %v", limit>>20, before.HeapInuse>>20, peak.Load()>>20, res.Duration)
	assert.NotContains(t, psOf(t, sb), "yes")

	ins, err := e.api.ContainerInspect(context.Background(), sb.ID())
	require.NoError(t, err)
	assert.Empty(t, ins.LogPath, "log driver none: nothing on the daemon's disk")
}

type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
