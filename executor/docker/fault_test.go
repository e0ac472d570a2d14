package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// daemonProxy relays a unix socket in a temp dir to the real daemon's, so
// that a test can make "the daemon" go away (down: every connection cut,
// the socket gone) and come back (up) without touching the shared daemon.
type daemonProxy struct {
	t      *testing.T
	sock   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newDaemonProxy(t *testing.T) *daemonProxy {
	testenv.RequireDocker(t)
	p := &daemonProxy{t: t, sock: filepath.Join(t.TempDir(), "docker.sock"), target: testenv.DockerHost(), conns: map[net.Conn]struct{}{}}
	p.up()
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

// host is the proxy's DOCKER_HOST.
func (p *daemonProxy) host() string { return "unix://" + p.sock }

func (p *daemonProxy) up() {
	ln, err := net.Listen("unix", p.sock)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.relay(c)
			}()
		}
	}()
}

// down closes the listener (which unlinks the socket: dials fail as with a
// stopped daemon) and cuts every open connection, streams included.
func (p *daemonProxy) down() {
	p.mu.Lock()
	ln, conns := p.ln, p.conns
	p.ln, p.conns = nil, map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
}

func (p *daemonProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *daemonProxy) relay(c net.Conn) {
	defer func() { _ = c.Close() }()
	d, err := net.Dial("unix", p.target)
	if err != nil {
		return
	}
	defer func() { _ = d.Close() }()
	if !p.track(c, d) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(d, c)
	go pipe(c, d)
	<-done
	<-done
}

// realDocker is a client of the real daemon, for the test's own actions.
func realDocker(t *testing.T) *client.Client {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// onBothPaths runs f on both exec paths with the options that pick each.
func onBothPaths(t *testing.T, f func(t *testing.T, mutate func(*Options))) {
	t.Run(PathDockerExec, func(t *testing.T) { f(t, func(*Options) {}) })
	t.Run(PathHelper, func(t *testing.T) {
		bin := testenv.HelperBinary(t)
		f(t, func(o *Options) { o.HelperBinary = bin })
	})
}

// longCommand starts a command that writes "started" to the workspace and
// then sleeps far past anything the test waits for; it returns when the
// command runs and a channel with Exec's outcome.
func longCommand(t *testing.T, sb *Sandbox, timeout time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "echo > started; exec sleep 600"}, Timeout: timeout})
		done <- err
	}()
	require.Eventually(t, func() bool {
		_, err := sb.Stat(context.Background(), "started")
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the long command started")
	return done
}

// waitExec waits for Exec's outcome and returns it with the time since
// the fault began; the command's own timeout is the bound that stops it
// otherwise (plus the stop grace and call timeouts).
func waitExec(t *testing.T, e *Executor, done <-chan error, timeout time.Duration, start time.Time) (time.Duration, error) {
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(timeout + e.o.StopGrace + 2*e.o.CallTimeout):
		t.Fatalf("Exec did not return within its timeout %v", timeout)
		return 0, nil
	}
}

// assertNextCreateWorks: the chat's lease was released and a new sandbox
// runs commands on it.
func assertNextCreateWorks(t *testing.T, e *Executor, chat string) {
	t.Helper()
	release, err := e.leases.Acquire(context.Background(), "u1/"+chat, 0)
	require.NoError(t, err, "the chat's lease was released")
	release()
	sb := create(t, e, testSpec(chat))
	assert.Equal(t, "ok", mustRun(t, sb, "echo ok"))
}

// TestFaultContainerRemovedMidRun: an operator's `docker rm -f` under a
// running command ends it with ErrSandboxGone (also ErrNotRunning), saying
// the container was removed, long before the command's own timeout; the
// sandbox refuses later commands at once, Close succeeds, the next Create
// works.
func TestFaultContainerRemovedMidRun(t *testing.T) {
	onBothPaths(t, func(t *testing.T, mutate func(*Options)) {
		e := newTestExecutor(t, mutate, func(o *Options) { o.CallTimeout = 10 * time.Second })
		cli := realDocker(t)
		sb := create(t, e, testSpec("removed"))
		const timeout = 5 * time.Minute
		done := longCommand(t, sb, timeout)

		fault := time.Now()
		require.NoError(t, cli.ContainerRemove(context.Background(), sb.ID(), container.RemoveOptions{Force: true}))
		took, err := waitExec(t, e, done, timeout, fault)
		t.Logf("exec ended %v after the removal began: %v", took, err)
		require.Error(t, err)
		assert.ErrorIs(t, err, executor.ErrSandboxGone)
		assert.ErrorIs(t, err, executor.ErrNotRunning)
		assert.NotErrorIs(t, err, executor.ErrTimeout, "stopped by the removal, not by its timeout")
		assert.Contains(t, err.Error(), "was removed while in use")
		assert.Contains(t, err.Error(), "send the request again")

		_, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
		assert.ErrorIs(t, err, executor.ErrSandboxGone, "later commands fail at once")
		require.NoError(t, sb.Close(context.Background()), "a container already gone is not a close error")
		assertNextCreateWorks(t, e, "removed")
	})
}

// TestFaultDaemonRestartMidRun: the daemon goes away under a running
// command (every connection cut, the socket gone) and, as a restart
// without live-restore does, takes the container with it; the command
// ends with ErrSandboxGone before its own timeout, Close releases the
// chat although the daemon does not answer, and once the daemon is back
// the next Create on the chat works.
func TestFaultDaemonRestartMidRun(t *testing.T) {
	onBothPaths(t, func(t *testing.T, mutate func(*Options)) {
		proxy := newDaemonProxy(t)
		e := newTestExecutor(t, mutate, func(o *Options) { o.DockerHost = proxy.host(); o.CallTimeout = 10 * time.Second })
		cli := realDocker(t)
		sb := create(t, e, testSpec("restart"))
		const timeout = 5 * time.Minute
		done := longCommand(t, sb, timeout)

		fault := time.Now()
		proxy.down()
		require.NoError(t, cli.ContainerRemove(context.Background(), sb.ID(), container.RemoveOptions{Force: true}))
		took, err := waitExec(t, e, done, timeout, fault)
		t.Logf("exec ended %v after the daemon went away: %v", took, err)
		require.Error(t, err)
		assert.ErrorIs(t, err, executor.ErrSandboxGone)
		assert.NotErrorIs(t, err, executor.ErrTimeout, "stopped by the restart, not by its timeout")
		assert.Contains(t, err.Error(), "send the request again")

		_ = sb.Close(context.Background()) // the daemon may not answer: an error, but the chat is released
		release, err := e.leases.Acquire(context.Background(), "u1/restart", 0)
		require.NoError(t, err, "the chat's lease was released while the daemon was away")
		release()

		spec := testSpec("restart")
		_, err = e.Create(context.Background(), spec)
		require.Error(t, err, "no sandbox starts while the daemon is away")
		assert.ErrorIs(t, err, executor.ErrUnavailable)
		assert.Contains(t, err.Error(), "start dockerd")

		proxy.up()
		assertNextCreateWorks(t, e, "restart")
	})
}

// TestFaultDaemonAwayContainerSurvives: the daemon stops answering
// mid-run but the container lives on (a daemon with live-restore, or a
// hung socket); the run fails with ErrSandboxGone, Close cannot remove the
// container, and the next Create on the chat, once the daemon answers,
// removes it first: one container on the workspace.
func TestFaultDaemonAwayContainerSurvives(t *testing.T) {
	proxy := newDaemonProxy(t)
	e := newTestExecutor(t, func(o *Options) { o.DockerHost = proxy.host(); o.CallTimeout = 10 * time.Second })
	cli := realDocker(t)
	sb := create(t, e, testSpec("survives"))
	oldID := sb.ID()
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), oldID, container.RemoveOptions{Force: true}) })
	const timeout = 5 * time.Minute
	done := longCommand(t, sb, timeout)

	fault := time.Now()
	proxy.down()
	took, err := waitExec(t, e, done, timeout, fault)
	t.Logf("exec ended %v after the daemon went away: %v", took, err)
	assert.ErrorIs(t, err, executor.ErrSandboxGone)
	assert.Contains(t, err.Error(), "stopped answering")
	assert.Error(t, sb.Close(context.Background()), "the container cannot be removed while the daemon is away")
	ins, err := cli.ContainerInspect(context.Background(), oldID)
	require.NoError(t, err)
	require.True(t, ins.State.Running, "the old container outlived the outage")

	proxy.up()
	next := create(t, e, testSpec("survives"))
	_, err = cli.ContainerInspect(context.Background(), oldID)
	assert.Error(t, err, "the old container was removed before the new one started")
	assert.Equal(t, "ok", mustRun(t, next, "echo ok"))
}

// TestFaultDaemonUnreachableAtStart: New against a daemon that is not
// there fails within its call timeout with ErrUnavailable, naming the
// socket and what to do, and leaves its data dir usable.
func TestFaultDaemonUnreachableAtStart(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close()) // the file stays, nobody listens: ECONNREFUSED
	hung := filepath.Join(dir, "hung.sock")
	hln, err := net.Listen("unix", hung)
	require.NoError(t, err)
	defer func() { _ = hln.Close() }()
	go func() { // accepts and never answers
		var held []net.Conn
		for {
			c, err := hln.Accept()
			if err != nil {
				for _, c := range held {
					_ = c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	const callTimeout = 2 * time.Second
	for name, sock := range map[string]string{"no socket": filepath.Join(dir, "missing.sock"), "stale socket": stale, "hung daemon": hung} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", "unix://"+sock)
			dataDir := t.TempDir()
			start := time.Now()
			_, err := New(context.Background(), Options{DataDir: dataDir, CallTimeout: callTimeout, ReconcileInterval: -1, RetentionInterval: -1})
			took := time.Since(start)
			require.Error(t, err)
			t.Logf("New failed after %v: %v", took, err)
			assert.ErrorIs(t, err, executor.ErrUnavailable)
			assert.Contains(t, err.Error(), sock)
			assert.Contains(t, err.Error(), "start dockerd or set DOCKER_HOST")
			if name == "hung daemon" {
				// Stopped by the call timeout, not by anything else.
				assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
			}
			entries, err := os.ReadDir(filepath.Join(dataDir))
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing made in the data dir")
		})
	}
}
