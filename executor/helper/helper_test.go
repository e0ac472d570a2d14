package helper

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// startLocal runs a Server in-process on a temp dir (the helper's logic
// without a container) and returns a ready client.
func startLocal(t *testing.T, o ServerOptions) (*Client, string) {
	t.Helper()
	dir := t.TempDir()
	o.Dir = dir
	if o.Workdir == "" {
		o.Workdir = dir
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(o).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	c, err := WaitReady(rctx, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, dir
}

func TestExecLocal(t *testing.T) {
	c, dir := startLocal(t, ServerOptions{KillGrace: 100 * time.Millisecond})
	tests := map[string]struct {
		cmd       executor.Cmd
		wantOut   string
		wantErr   string
		wantCode  int
		wantIs    error
		wantSig   string
		maxDurati time.Duration
	}{
		"stdout and exit code": {cmd: executor.Cmd{Args: []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}}, wantOut: "hi\n", wantErr: "err\n", wantCode: 3},
		"env and dir":          {cmd: executor.Cmd{Args: []string{"sh", "-c", "echo $FOO; pwd"}, Env: []string{"FOO=bar"}, Dir: "/"}, wantOut: "bar\n/\n"},
		"default dir":          {cmd: executor.Cmd{Args: []string{"pwd"}}, wantOut: dir + "\n"},
		"stdin":                {cmd: executor.Cmd{Args: []string{"cat"}, Stdin: strings.NewReader("piped\n")}, wantOut: "piped\n"},
		"stdin ignored":        {cmd: executor.Cmd{Args: []string{"true"}, Stdin: strings.NewReader(strings.Repeat("x", 1<<20))}},
		"not found":            {cmd: executor.Cmd{Args: []string{"/nonexistent/prog"}}, wantIs: executor.ErrNotFound, wantCode: -1},
		"not on own PATH":      {cmd: executor.Cmd{Args: []string{"sh", "-c", "true"}, Env: []string{"PATH=/nonexistent"}}, wantIs: executor.ErrNotFound, wantCode: -1},
		"found on own PATH":    {cmd: executor.Cmd{Args: []string{"sh", "-c", "echo $PATH"}, Env: []string{"PATH=/nonexistent:/bin:/usr/bin"}}, wantOut: "/nonexistent:/bin:/usr/bin\n"},
		"empty args":           {cmd: executor.Cmd{}, wantIs: executor.ErrInvalid, wantCode: -1},
		"timeout kills group": {
			cmd:    executor.Cmd{Args: []string{"sh", "-c", "sleep 30 & sleep 30; wait"}, Timeout: 200 * time.Millisecond},
			wantIs: executor.ErrTimeout, wantCode: -1, wantSig: "SIGTERM", maxDurati: 3 * time.Second,
		},
		"output cap": {
			cmd:    executor.Cmd{Args: []string{"sh", "-c", "yes"}, MaxOutput: 100000},
			wantIs: executor.ErrOutputTooLarge, wantCode: -1, wantSig: "SIGTERM", wantOut: strings.Repeat("y\n", 50000),
		},
		"signal": {cmd: executor.Cmd{Args: []string{"sh", "-c", "kill -9 $$"}}, wantCode: -1, wantSig: "SIGKILL"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			cmd := tc.cmd
			cmd.Stdout, cmd.Stderr = &out, &errb
			res, err := c.Exec(context.Background(), &cmd)
			if tc.wantIs != nil {
				require.ErrorIs(t, err, tc.wantIs)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.wantCode, res.ExitCode)
			assert.Equal(t, tc.wantSig, res.Signal)
			assert.Equal(t, "helper", res.Path)
			if tc.wantIs == nil || tc.wantOut != "" {
				assert.Equal(t, tc.wantOut, out.String())
				assert.Equal(t, tc.wantErr, errb.String())
			}
			if tc.maxDurati > 0 {
				assert.Less(t, res.Duration, tc.maxDurati)
			}
		})
	}
}

func TestExecCancelKillsGroup(t *testing.T) {
	c, dir := startLocal(t, ServerOptions{KillGrace: 100 * time.Millisecond})
	pidFile := filepath.Join(dir, "pids")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Stdin left open: cancel must not depend on the command reading it.
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer func() { _ = pw.Close(); _ = pr.Close() }()
	_, err = c.Exec(ctx, &executor.Cmd{
		Args: []string{"sh", "-c", "sleep 1000 & echo $! > " + pidFile + "; setsid sleep 1001 & echo $! >> " + pidFile +
			"; echo $$ >> " + pidFile + "; sleep 1000; wait"},
		Stdin: pr,
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	for _, f := range strings.Fields(string(b)) {
		var pid int
		_, _ = fmtSscan(f, &pid)
		require.NotZero(t, pid)
		assert.True(t, processGone(pid), "pid %d still alive", pid)
	}
}

func TestDeadlineKillsAndReturns(t *testing.T) {
	dir := t.TempDir()
	srv := NewServer(ServerOptions{Dir: dir, Workdir: dir, Deadline: time.Now().Add(700 * time.Millisecond)})
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := WaitReady(ctx, dir)
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Exec(ctx, &executor.Cmd{Args: []string{"sleep", "100"}})
	require.ErrorIs(t, err, executor.ErrNotRunning)
	assert.Less(t, time.Since(start), 3*time.Second)
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrDeadline)
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return at the deadline")
	}
}

func TestClientClosed(t *testing.T) {
	c, _ := startLocal(t, ServerOptions{})
	require.NoError(t, c.Close())
	_, err := c.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
	require.ErrorIs(t, err, executor.ErrNotRunning)
	_, err = WaitReady(ctxTimeout(t, 50*time.Millisecond), t.TempDir())
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// processGone reports whether pid no longer exists (or is a zombie).
func processGone(pid int) bool {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat")); err == nil && isZombie(b) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestModelForwarderSurvivesHostRestart: the helper dials model.sock per
// connection, so a host listener closed and opened again is picked up.
func TestModelForwarderSurvivesHostRestart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	_, dir := startLocal(t, ServerOptions{ModelPort: port})

	serveOnce := func(answer string) net.Listener {
		ln, err := ListenHostSocket(dir, ModelSocket, -1, -1)
		require.NoError(t, err)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, answer)
				_ = c.Close()
			}
		}()
		return ln
	}
	get := func() string {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		b, _ := io.ReadAll(c)
		return string(b)
	}
	ln := serveOnce("first")
	assert.Equal(t, "first", get())
	require.NoError(t, ln.Close())
	assert.Empty(t, get(), "no host listener: the connection is closed")
	ln = serveOnce("second")
	defer func() { _ = ln.Close() }()
	assert.Equal(t, "second", get())
}

func TestExecCanceledBeforeStart(t *testing.T) {
	c, _ := startLocal(t, ServerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
	require.ErrorIs(t, err, context.Canceled)
}

// TestExecSocketRefusesOversizedFrame: a first frame announcing 300 MB is
// refused before anything is allocated; the helper keeps serving.
func TestExecSocketRefusesOversizedFrame(t *testing.T) {
	c, dir := startLocal(t, ServerOptions{})
	conn, err := net.Dial("unix", SocketPath(dir, ExecSocket))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = conn.Write([]byte{frameRequest, 0x11, 0xE1, 0xA3, 0x00}) // 300,000,000
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(make([]byte, 16))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, io.EOF, "the helper hangs up")
	fr := &frameReader{r: bytes.NewReader([]byte{frameStdout, 0x11, 0xE1, 0xA3, 0x00})}
	_, _, err = fr.next()
	require.ErrorIs(t, err, ErrFrameTooLarge, "the host side refuses the same")
	require.NoError(t, c.Ping(context.Background()))
}

// TestLongSocketPaths: host directories whose socket paths exceed the
// kernel's 108-byte sun_path still work (dialled through /proc/self/fd).
func TestLongSocketPaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandboxes", strings.Repeat("0123456789abcdef", 4))
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.Greater(t, len(SocketPath(dir, ExecSocket)), maxSockPath)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(ServerOptions{Dir: dir, Workdir: dir}).Run(ctx) }()
	defer func() { cancel(); assert.NoError(t, <-done) }()
	c, err := WaitReady(ctxTimeout(t, 5*time.Second), dir)
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = c.Exec(context.Background(), &executor.Cmd{Args: []string{"echo", "long"}, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "long\n", out.String())

	ln, err := ListenHostSocket(dir, MCPSocket, -1, -1)
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	fi, err := os.Stat(SocketPath(dir, MCPSocket))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	go func() {
		if conn, err := ln.Accept(); err == nil {
			_, _ = io.WriteString(conn, "hi\n")
			_ = conn.Close()
		}
	}()
	conn, err := dialSock(context.Background(), dir, MCPSocket)
	require.NoError(t, err)
	b, _ := io.ReadAll(conn)
	_ = conn.Close()
	assert.Equal(t, "hi\n", string(b))
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestExecStdoutWriteError: a failing Stdout ends the command (killed, not
// left running) and Exec reports the write error.
func TestExecStdoutWriteError(t *testing.T) {
	c, _ := startLocal(t, ServerOptions{KillGrace: 100 * time.Millisecond})
	start := time.Now()
	_, err := c.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "echo x; sleep 30"}, Stdout: failingWriter{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk full")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestEgressForwarderRelaysToEgressSocket: the egress port is relayed to
// egress.sock, not to model.sock, and both relays run side by side.
func TestEgressForwarderRelaysToEgressSocket(t *testing.T) {
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer func() { _ = l.Close() }()
		return l.Addr().(*net.TCPAddr).Port
	}
	mport, eport := free(), free()
	_, dir := startLocal(t, ServerOptions{ModelPort: mport, EgressPort: eport})
	for name, answer := range map[string]string{ModelSocket: "model", EgressSocket: "egress"} {
		ln, err := ListenHostSocket(dir, name, -1, -1)
		require.NoError(t, err)
		defer func() { _ = ln.Close() }()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, answer)
				_ = c.Close()
			}
		}()
	}
	get := func(port int) string {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		b, _ := io.ReadAll(c)
		return string(b)
	}
	assert.Equal(t, "egress", get(eport))
	assert.Equal(t, "model", get(mport))
	assert.Contains(t, strings.Join(ServeArgs("/h", ServeOptions{EgressPort: eport}), " "), "--egress-port "+strconv.Itoa(eport))
}
