package helper

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// startPort runs a Server with an ExecPort on a temp workdir and returns a
// client that reaches it over TCP, as the Kubernetes backend does through
// its port forward.
func startPort(t *testing.T, o ServerOptions) (*Client, string) {
	t.Helper()
	c, workdir, _ := startPortDirs(t, o)
	return c, workdir
}

// startPortDirs is startPort that also returns the helper's Dir.
func startPortDirs(t *testing.T, o ServerOptions) (c *Client, workdir, dir string) {
	t.Helper()
	o.ExecPort = freePort(t)
	o.Workdir = t.TempDir()
	_, dir = startLocal(t, o)
	addr := "127.0.0.1:" + strconv.Itoa(o.ExecPort)
	c = NewDialClient(addr, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.WaitReady(ctx))
	t.Cleanup(func() { _ = c.Close() })
	return c, o.Workdir, dir
}

// TestFileServiceOverExecPort: the file API through the helper behaves as
// the host-side Workspace, content larger than one frame included, and
// exec works on the same port.
func TestFileServiceOverExecPort(t *testing.T) {
	c, dir := startPort(t, ServerOptions{})
	ctx := context.Background()

	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB: many frames
	require.NoError(t, c.WriteFile(ctx, "src/big.bin", big))
	got, err := c.ReadFile(ctx, "/workspace/src/big.bin")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(big, got), "read back %d bytes, wrote %d", len(got), len(big))
	onDisk, err := os.ReadFile(filepath.Join(dir, "src/big.bin"))
	require.NoError(t, err)
	assert.Equal(t, len(big), len(onDisk))

	require.NoError(t, c.WriteFile(ctx, "a.go", []byte("x := 1\n")))
	require.NoError(t, c.WriteFile(ctx, "empty", nil))
	list, err := c.ListDir(ctx, ".")
	require.NoError(t, err)
	var names []string
	for _, fi := range list {
		names = append(names, fi.Name)
	}
	assert.Equal(t, []string{"a.go", "empty", "src"}, names)
	fi, err := c.Stat(ctx, "src")
	require.NoError(t, err)
	assert.True(t, fi.IsDir)

	res, err := c.EditFile(ctx, "a.go", []executor.Edit{{Old: "x := 1", New: ptrTo("x := 2")}})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Applied)
	assert.Equal(t, "x := 2\n", res.Content)
	_, err = c.EditFile(ctx, "a.go", []executor.Edit{{Old: "absent", New: ptrTo("y")}})
	var ee *executor.EditError
	require.ErrorAs(t, err, &ee, "edit failures keep their structure")
	assert.Equal(t, 0, ee.Index)
	assert.ErrorIs(t, err, executor.ErrInvalid)

	var out bytes.Buffer
	r, err := c.Exec(ctx, &executor.Cmd{Args: []string{"cat", "a.go"}, Dir: dir, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, r.ExitCode)
	assert.Equal(t, "x := 2\n", out.String())

	_, err = c.ReadFile(ctx, "missing")
	assert.ErrorIs(t, err, executor.ErrNotFound)
}

// TestFileServiceRefusesEscapes: what the agent plants (links, a FIFO,
// a link in place of a directory) is refused through the helper exactly as
// on the host, and RestoreFile repairs a planted parent link.
func TestFileServiceRefusesEscapes(t *testing.T) {
	c, dir := startPort(t, ServerOptions{MaxFileSize: 1 << 20})
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink(filepath.Dir(secret), filepath.Join(dir, "up")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))

	for _, name := range []string{"link", "up/secret", "/etc/passwd", "../x", "a\x00b"} {
		_, err := c.ReadFile(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, name)
		assert.ErrorIs(t, c.WriteFile(ctx, name, []byte("x")), executor.ErrPathEscapes, name)
	}
	_, err := c.ListDir(ctx, "up")
	assert.ErrorIs(t, err, executor.ErrPathEscapes)
	done := make(chan error, 1)
	go func() { _, err := c.ReadFile(ctx, "fifo"); done <- err }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, executor.ErrInvalid, "a FIFO is refused, never opened")
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO through the helper blocked")
	}
	got, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(got), "nothing outside the workspace changed")

	// The helper's own cap applies to uploads.
	err = c.WriteFile(ctx, "huge", make([]byte, 1<<20+1))
	assert.ErrorIs(t, err, executor.ErrOutputTooLarge)

	require.NoError(t, os.Symlink("/tmp", filepath.Join(dir, ".agentbox")))
	require.NoError(t, c.RestoreFile(ctx, ".agentbox/system-prompt.md", []byte("be brief")))
	fi, err := os.Lstat(filepath.Join(dir, ".agentbox"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the planted link was replaced by a directory")
}

// TestFileClientBoundsAHostileHelper: a process that took the helper's
// port cannot make the host buffer without bound or hang it.
func TestFileClientBoundsAHostileHelper(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				chunk := make([]byte, chunkSize)
				for {
					if writeFrame(conn, frameStdout, chunk) != nil {
						return
					}
				}
			}()
		}
	}()
	c := NewDialClient(ln.Addr().String(), func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.ReadFile(ctx, "x")
	assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
}

func ptrTo(s string) *string { return &s }

// TestWriteTokenThroughTheHelper: a host without the helper's directory
// gives it the MCP token; the file is the sandbox user's, 0400, and a
// token that is not one line is refused.
func TestWriteTokenThroughTheHelper(t *testing.T) {
	c, _, dir := startPortDirs(t, ServerOptions{})
	ctx := context.Background()
	require.NoError(t, c.WriteToken(ctx, "tok-1"))
	require.NoError(t, c.WriteToken(ctx, "tok-2"), "a later request replaces it")
	b, err := os.ReadFile(filepath.Join(dir, TokenFile))
	require.NoError(t, err)
	assert.Equal(t, "tok-2\n", string(b))
	fi, err := os.Stat(filepath.Join(dir, TokenFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o400), fi.Mode().Perm())
	for _, bad := range []string{"", "a\nb", "a\x00b"} {
		assert.ErrorIs(t, c.WriteToken(ctx, bad), executor.ErrInvalid, "%q", bad)
	}
}

// TestCheckQuotaThroughTheHelper: the helper measures its workspace
// against the host's limits, without following a link out of it, and
// refuses a request without limits.
func TestCheckQuotaThroughTheHelper(t *testing.T) {
	c, dir := startPort(t, ServerOptions{})
	ctx := context.Background()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("x"), 2<<20), 0o644))
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "huge"), bytes.Repeat([]byte("x"), 8<<20), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "out")))

	require.NoError(t, c.CheckQuota(ctx, 4<<20, 100), "2 MiB and two entries are within 4 MiB and 100")
	err := c.CheckQuota(ctx, 1<<20, 100)
	require.ErrorIs(t, err, executor.ErrNoSpace)
	assert.Contains(t, err.Error(), "disk quota of 1.0 MiB")
	err = c.CheckQuota(ctx, 4<<20, 1)
	require.ErrorIs(t, err, executor.ErrNoSpace)
	assert.Contains(t, err.Error(), "sandbox.max_inodes")
	assert.ErrorIs(t, c.CheckQuota(ctx, 0, 100), executor.ErrInvalid)
}
