package helper

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Defaults the host applies when a Cmd leaves Timeout or MaxOutput at 0.
const (
	DefaultTimeout   = 10 * time.Minute
	DefaultMaxOutput = 64 << 20
)

// hostGrace is how long the host waits beyond a command's own timeout, or
// after a cancel, for the helper's exit frame before giving up on it, on
// top of the helper's kill grace and output drain.
const hostGrace = 3 * time.Second

// ServeOptions are the helper's command-line options as the host sets them
// in the container's main command.
type ServeOptions struct {
	// Dir is the per-sandbox directory inside the container (ContainerDir
	// when empty).
	Dir string
	// Workdir is the default working directory (executor.ContainerWorkdir
	// when empty).
	Workdir string
	// Deadline is the sandbox's end: the helper kills every command and
	// exits at it even when the host is gone. Zero means none.
	Deadline time.Time
	// ModelPort, when > 0, makes the helper relay 127.0.0.1:ModelPort to
	// Dir/model.sock (set ANTHROPIC_BASE_URL=http://127.0.0.1:ModelPort).
	ModelPort int
	// EgressPort, when > 0, makes the helper relay 127.0.0.1:EgressPort to
	// Dir/egress.sock (set HTTP_PROXY=http://127.0.0.1:EgressPort).
	EgressPort int
	// KillGrace is the SIGTERM→SIGKILL delay for cancelled commands
	// (DefaultKillGrace when 0).
	KillGrace time.Duration
	// ExecPort, when > 0, also serves the exec and file protocol on
	// 127.0.0.1:ExecPort, for hosts that reach the sandbox through a port
	// forward (NewDialClient).
	ExecPort int
	// Reverse relays model, egress and MCP traffic over connections the
	// host parks on ExecPort (ListenReverse) instead of host sockets in Dir.
	Reverse bool
	// Debug makes the helper log to its stderr.
	Debug bool
}

// ServeArgs returns the container's main command line running the helper at
// binPath (for example /usr/local/bin/agentbox-helper, or a read-only bind
// mount of a host build). Run it under Docker's Init.
func ServeArgs(binPath string, o ServeOptions) []string {
	if o.Dir == "" {
		o.Dir = ContainerDir
	}
	if o.Workdir == "" {
		o.Workdir = executor.ContainerWorkdir
	}
	args := []string{binPath, "serve", "--dir", o.Dir, "--workdir", o.Workdir}
	if !o.Deadline.IsZero() {
		args = append(args, "--deadline", o.Deadline.UTC().Format(time.RFC3339Nano))
	}
	if o.ModelPort > 0 {
		args = append(args, "--model-port", strconv.Itoa(o.ModelPort))
	}
	if o.EgressPort > 0 {
		args = append(args, "--egress-port", strconv.Itoa(o.EgressPort))
	}
	if o.KillGrace > 0 {
		args = append(args, "--kill-grace", o.KillGrace.String())
	}
	if o.ExecPort > 0 {
		args = append(args, "--exec-port", strconv.Itoa(o.ExecPort))
	}
	if o.Reverse {
		args = append(args, "--reverse")
	}
	if o.Debug {
		args = append(args, "--debug")
	}
	return args
}

// Client is the host side of the helper of one sandbox: it dials
// {hostDir}/exec.sock (or what NewDialClient's dial reaches) once per
// command or file operation.
type Client struct {
	sock  string // where the helper is, for messages
	dialf func(context.Context) (net.Conn, error)
	grace atomic.Int64 // ns the host waits for a stopped command's exit frame

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// NewClient returns a client for the helper serving in hostDir, without
// checking that it is there (WaitReady does).
func NewClient(hostDir string) *Client {
	return NewDialClient(SocketPath(hostDir, ExecSocket), func(ctx context.Context) (net.Conn, error) {
		return dialSock(ctx, hostDir, ExecSocket)
	})
}

// NewDialClient returns a client for a helper that dial reaches, such as
// a port forward to its ExecPort; where names it in errors.
func NewDialClient(where string, dial func(context.Context) (net.Conn, error)) *Client {
	c := &Client{sock: where, dialf: dial, conns: map[net.Conn]struct{}{}}
	c.grace.Store(int64(DefaultKillGrace + drainWait + hostGrace))
	return c
}

// WaitReady dials {hostDir}/exec.sock until the helper answers the hello
// handshake, and returns a client for it. It retries while the socket is
// missing or refuses, until ctx ends; the caller bounds ctx (and cancels it
// when the container dies, which only the backend can see).
func WaitReady(ctx context.Context, hostDir string) (*Client, error) {
	c := NewClient(hostDir)
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// ProxyEnv is the environment that sends a sandbox's HTTP(S) traffic to
// the helper's egress relay on port (ServeOptions.EgressPort): the
// variables curl, wget, git, npm and pip read, in both cases, with
// loopback (the model relay) exempted. It is nil when port is 0.
func ProxyEnv(port int) []string {
	if port <= 0 {
		return nil
	}
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	const noProxy = "localhost,127.0.0.1,::1"
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "NO_PROXY=" + noProxy, "no_proxy=" + noProxy}
}

// WaitReady pings the helper until it answers the hello handshake, retrying
// while it cannot be reached, until ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	return c.WaitReadyEvery(ctx, 20*time.Millisecond)
}

// WaitReadyEvery is WaitReady with retries backing off from 1 ms to at
// most every apart: backends whose failed attempts cost more than a
// refused connect (a port forward through the API server, which logs
// each one) retry less often.
func (c *Client) WaitReadyEvery(ctx context.Context, every time.Duration) error {
	return c.WaitReadyPaced(ctx, func() time.Duration { return every })
}

// WaitReadyPaced is WaitReadyEvery with the longest wait between attempts
// read before each wait, so that a caller that learns the helper is about
// to listen (its container runs) can shorten it.
func (c *Client) WaitReadyPaced(ctx context.Context, every func() time.Duration) error {
	backoff := time.Millisecond
	for {
		err := c.Ping(ctx)
		if err == nil {
			return nil
		}
		var verr *versionError
		if errors.As(err, &verr) {
			return err
		}
		// The pace is read after the attempt: one that learned the
		// helper is near shortens the wait after it, not the one after.
		backoff = max(min(backoff, every()), time.Millisecond)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("helper: not ready at %s: %w (last error: %w)", c.sock, ctx.Err(), err)
		case <-t.C:
		}
		backoff *= 2
	}
}

// versionError is a helper that speaks another protocol version.
type versionError struct{ got int }

func (e *versionError) Error() string {
	return fmt.Sprintf("helper: protocol version %d, want %d; rebuild the image or the mounted helper from this module", e.got, ProtocolVersion)
}

// Ping checks once that the helper answers.
func (c *Client) Ping(ctx context.Context) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer c.release(conn)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	b, _ := json.Marshal(hello{Version: ProtocolVersion})
	if err := writeFrame(conn, frameHello, b); err != nil {
		return fmt.Errorf("helper: hello: %w", err)
	}
	fr := &frameReader{r: conn}
	typ, p, err := fr.next()
	if err != nil {
		return fmt.Errorf("helper: hello: %w", err)
	}
	var h hello
	if typ != frameHello || json.Unmarshal(p, &h) != nil {
		return fmt.Errorf("helper: hello: unexpected answer %q", typ)
	}
	if h.Version != ProtocolVersion {
		return &versionError{got: h.Version}
	}
	if h.KillGraceMS > 0 {
		c.grace.Store(int64(time.Duration(h.KillGraceMS)*time.Millisecond + drainWait + hostGrace))
	}
	return nil
}

// dial opens one connection and tracks it so Close can end it.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("helper: client closed: %w", executor.ErrNotRunning)
	}
	conn, err := c.dialf(ctx)
	if err != nil {
		return nil, fmt.Errorf("helper: dial %s: %w (%w)", c.sock, executor.ErrNotRunning, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = conn.Close()
		return nil, fmt.Errorf("helper: client closed: %w", executor.ErrNotRunning)
	}
	c.conns[conn] = struct{}{}
	return conn, nil
}

func (c *Client) release(conn net.Conn) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
	_ = conn.Close()
}

// Close ends the client: running commands lose their connection (the
// helper kills their process groups) and later calls fail with
// executor.ErrNotRunning. It is safe to call more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[net.Conn]struct{}{}
	c.mu.Unlock()
	for conn := range conns {
		_ = conn.Close()
	}
	return nil
}

// kill asks the helper, on a connection of its own, to kill command id.
func (c *Client) kill(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := c.dialf(ctx)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	b, _ := json.Marshal(killRequest{ID: id})
	if writeFrame(conn, frameKill, b) == nil {
		_, _ = conn.Read(make([]byte, headerSize)) // acknowledgement
	}
}

// Exec runs cmd through the helper and waits for it, streaming its output
// to cmd.Stdout and cmd.Stderr as it arrives. Cancelling ctx kills the
// command's process group (and processes that left it but carry its
// ExecIDEnv); Exec then returns once the helper reported the command ended
// (or after a grace), with an error wrapping ctx.Err(). As with os/exec, a
// cmd.Stdin that blocks in Read keeps its copying goroutine until it
// returns; Exec does not wait for it.
func (c *Client) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	res := executor.ExecResult{ExitCode: -1, Path: "helper"}
	if cmd == nil || len(cmd.Args) == 0 {
		return res, fmt.Errorf("helper: exec needs a command: %w", executor.ErrInvalid)
	}
	if cmd.Timeout < 0 || cmd.MaxOutput < 0 {
		return res, fmt.Errorf("helper: exec %q: negative Timeout or MaxOutput: %w", cmd.Args[0], executor.ErrInvalid)
	}
	timeout := cmd.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	maxOut := cmd.MaxOutput
	if maxOut == 0 {
		maxOut = DefaultMaxOutput
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("helper: exec %q: %w", cmd.Args[0], err)
	}
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()

	conn, err := c.dial(ctx)
	if err != nil {
		return res, err
	}
	defer c.release(conn)
	id := newID()
	req, _ := json.Marshal(execRequest{
		ID: id, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
		TimeoutMS: timeout.Milliseconds(), MaxOutput: maxOut, Stdin: cmd.Stdin != nil,
	})
	if len(req) > MaxFrame {
		return res, fmt.Errorf("helper: exec %q: argv and env take %d bytes, over the %d cap; pass large data on stdin: %w", cmd.Args[0], len(req), MaxFrame, executor.ErrInvalid)
	}
	var wmu sync.Mutex
	if err := writeFrame(conn, frameRequest, req); err != nil {
		return res, fmt.Errorf("helper: exec %q: send request: %w (%w)", cmd.Args[0], executor.ErrNotRunning, err)
	}
	if cmd.Stdin != nil {
		go copyStdin(conn, &wmu, cmd.Stdin)
	}

	grace := time.Duration(c.grace.Load())
	// A cancelled ctx kills the command over a separate connection (the main
	// one may be blocked on stdin), then the exit frame is awaited briefly.
	canceled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		close(canceled)
		c.kill(id)
		_ = conn.SetReadDeadline(time.Now().Add(grace))
	})
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(timeout + grace))

	stdout, stderr := orDiscard(cmd.Stdout), orDiscard(cmd.Stderr)
	var nOut, nErr int64
	fr := &frameReader{r: bufio.NewReaderSize(conn, 4096)} // large payloads bypass the buffer
	defer fr.release()
	var writeErr error
	for {
		typ, p, err := fr.next()
		if err != nil {
			select {
			case <-canceled:
				return res, fmt.Errorf("helper: exec %q: %w", cmd.Args[0], ctx.Err())
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.kill(id)
				return res, fmt.Errorf("helper: exec %q: no answer %s past its timeout: %w", cmd.Args[0], grace, executor.ErrTimeout)
			}
			return res, fmt.Errorf("helper: exec %q: connection lost: %w (%w)", cmd.Args[0], executor.ErrNotRunning, err)
		}
		switch typ {
		case frameStdout, frameStderr:
			w, n := stdout, &nOut
			if typ == frameStderr {
				w, n = stderr, &nErr
			}
			*n += int64(len(p))
			if *n > maxOut {
				// The helper enforces the cap; this guards against one
				// that does not.
				c.kill(id)
				return res, fmt.Errorf("helper: exec %q: more than %d bytes of output: %w", cmd.Args[0], maxOut, executor.ErrOutputTooLarge)
			}
			if writeErr == nil {
				if _, err := w.Write(p); err != nil {
					writeErr = err
					go c.kill(id)
				}
			}
		case frameExit:
			var st exitStatus
			if err := json.Unmarshal(p, &st); err != nil {
				return res, fmt.Errorf("helper: exec %q: malformed exit frame: %w", cmd.Args[0], err)
			}
			res.ExitCode, res.Signal, res.OOMKilled = st.ExitCode, st.Signal, st.OOMKilled
			select {
			case <-canceled:
				return res, fmt.Errorf("helper: exec %q: %w", cmd.Args[0], ctx.Err())
			default:
			}
			if writeErr != nil {
				return res, fmt.Errorf("helper: exec %q: write output: %w", cmd.Args[0], writeErr)
			}
			return res, exitError(cmd.Args[0], st, timeout, maxOut)
		}
	}
}

// exitError turns the helper's failure kind into the executor's sentinels.
func exitError(prog string, st exitStatus, timeout time.Duration, maxOut int64) error {
	switch st.Error {
	case "":
		return nil
	case failTimeout:
		return fmt.Errorf("helper: exec %q: killed after %s: %w; raise Cmd.Timeout if it needs longer", prog, timeout, executor.ErrTimeout)
	case failOutput:
		return fmt.Errorf("helper: exec %q: killed after %d bytes on one stream: %w; raise Cmd.MaxOutput or write to a file", prog, maxOut, executor.ErrOutputTooLarge)
	case failDeadline:
		return fmt.Errorf("helper: exec %q: the sandbox reached its deadline or is shutting down: %w", prog, executor.ErrNotRunning)
	case failNotFound:
		return fmt.Errorf("helper: exec %q: %s: %w", prog, st.Message, executor.ErrNotFound)
	case failInvalid:
		return fmt.Errorf("helper: exec %q: %s: %w", prog, st.Message, executor.ErrInvalid)
	case failCanceled:
		return fmt.Errorf("helper: exec %q: killed by the helper: %s: %w", prog, st.Message, executor.ErrNotRunning)
	default:
		return fmt.Errorf("helper: exec %q: %s: %s", prog, st.Error, st.Message)
	}
}

// copyStdin streams r to the helper in frames, then signals EOF.
func copyStdin(w io.Writer, wmu *sync.Mutex, r io.Reader) {
	bp := getChunk()
	defer putChunk(bp)
	buf := *bp
	for {
		n, err := r.Read(buf[headerSize:])
		if n > 0 {
			wmu.Lock()
			werr := writeDataFrame(w, frameStdin, buf, n)
			wmu.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			wmu.Lock()
			_ = writeFrame(w, frameStdinEOF, nil)
			wmu.Unlock()
			return
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
