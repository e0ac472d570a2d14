package helper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Socket names inside the per-sandbox directory ({hostDir} on the host,
// /run/agentbox in the container).
const (
	// ExecSocket is where the helper listens; the host dials it per command.
	ExecSocket = "exec.sock"
	// ModelSocket is the host's model proxy; the helper dials it per TCP
	// connection the agent opens on 127.0.0.1:<ModelPort>.
	ModelSocket = "model.sock"
	// EgressSocket is the host's egress proxy (package executor/egress);
	// the helper dials it per TCP connection the agent opens on
	// 127.0.0.1:<EgressPort>, its HTTP_PROXY.
	EgressSocket = "egress.sock"
	// MCPSocket is the host's MCP endpoint; `agentbox-helper mcp` dials it.
	MCPSocket = "mcp.sock"
	// TokenFile, when the host writes it (mode 0400, owned by the sandbox
	// user), holds the per-request token for `agentbox-helper mcp` if the
	// AGENTBOX_TOKEN environment variable is not set.
	TokenFile = "token"
	// ContainerDir is where the per-sandbox directory is mounted.
	ContainerDir = "/run/agentbox"
)

// ProtocolVersion is exchanged in the hello frames; a host refuses a helper
// that speaks another version. Version 2 added the file service (frameFS)
// and the exec port, version 3 the quota measurement (CheckQuota).
const ProtocolVersion = 3

// MaxFrame caps the payload of one exec-protocol frame. Output travels in
// frames of at most chunkSize bytes; a peer announcing more than MaxFrame is
// refused with ErrFrameTooLarge before anything is allocated.
const MaxFrame = 1 << 20

// chunkSize is the largest stdout/stderr/stdin data frame written.
const chunkSize = 32 << 10

// headerSize is one type byte and a big-endian uint32 payload length.
const headerSize = 5

// Frame types of the exec protocol. Each connection to exec.sock carries one
// exchange, chosen by its first frame: hello (readiness), request (one
// command) or kill (cancel a running command by id).
const (
	frameHello    byte = 'H' // both ways: JSON hello
	frameRequest  byte = 'R' // host→helper: JSON execRequest
	frameKill     byte = 'K' // host→helper on a fresh connection: JSON killRequest
	frameStdin    byte = 'I' // host→helper: stdin bytes
	frameStdinEOF byte = 'E' // host→helper: stdin closed
	frameStdout   byte = 'O' // helper→host: stdout bytes
	frameStderr   byte = 'D' // helper→host: stderr bytes
	frameExit     byte = 'X' // helper→host: JSON exitStatus, last frame
)

// ErrFrameTooLarge reports a frame or line longer than the protocol's cap;
// the connection is closed because the peer is broken or hostile.
var ErrFrameTooLarge = errors.New("helper: frame exceeds the size cap")

// hello is the readiness handshake.
type hello struct {
	Version int `json:"version"`
	PID     int `json:"pid,omitempty"`
	// KillGraceMS is the helper's SIGTERM→SIGKILL delay; the host waits
	// that long (plus the output drain) for a stopped command's exit frame.
	KillGraceMS int64 `json:"kill_grace_ms,omitempty"`
}

// execRequest is one command, as the host asks for it.
type execRequest struct {
	ID        string   `json:"id"`
	Args      []string `json:"args"`
	Env       []string `json:"env,omitempty"`
	Dir       string   `json:"dir,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	MaxOutput int64    `json:"max_output,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"`
}

// killRequest cancels the running command with the given id.
type killRequest struct {
	ID string `json:"id"`
}

// Failure kinds carried in exitStatus.Error.
const (
	failTimeout  = "timeout"
	failOutput   = "output_too_large"
	failStart    = "start"
	failNotFound = "not_found"
	failCanceled = "canceled"
	failInvalid  = "invalid"
	failDeadline = "deadline"
)

// exitStatus is the helper's last frame for a command.
type exitStatus struct {
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	OOMKilled  bool   `json:"oom_killed,omitempty"`
	Error      string `json:"error,omitempty"`   // one of the fail* kinds
	Message    string `json:"message,omitempty"` // human-readable detail
	DurationNS int64  `json:"duration_ns"`
}

// writeFrame writes one frame with a single Write call.
func writeFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("%w: %d bytes (cap %d)", ErrFrameTooLarge, len(payload), MaxFrame)
	}
	buf := make([]byte, headerSize+len(payload))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:headerSize], uint32(len(payload)))
	copy(buf[headerSize:], payload)
	_, err := w.Write(buf)
	return err
}

// writeDataFrame writes buf[headerSize:headerSize+n] as a frame of type typ,
// using buf[:headerSize] for the header so data is not copied.
func writeDataFrame(w io.Writer, typ byte, buf []byte, n int) error {
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:headerSize], uint32(n))
	_, err := w.Write(buf[:headerSize+n])
	return err
}

// chunkPool holds headerSize+chunkSize buffers for data frames, so a
// command's output pumps and readers do not allocate 32 KiB each per exec.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, headerSize+chunkSize); return &b }}

func getChunk() *[]byte  { return chunkPool.Get().(*[]byte) }
func putChunk(b *[]byte) { chunkPool.Put(b) }

// frameReader reads frames into a reused buffer.
type frameReader struct {
	r      io.Reader
	hdr    [headerSize]byte
	buf    []byte
	pooled *[]byte
}

// release returns a pooled buffer; the reader must not be used after.
func (f *frameReader) release() {
	if f.pooled != nil {
		putChunk(f.pooled)
		f.pooled, f.buf = nil, nil
	}
}

// next returns the next frame; payload is valid until the following call.
func (f *frameReader) next() (byte, []byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(f.hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: peer announced %d bytes (cap %d)", ErrFrameTooLarge, n, MaxFrame)
	}
	if cap(f.buf) < int(n) {
		if n <= headerSize+chunkSize && f.pooled == nil {
			f.pooled = getChunk()
			f.buf = *f.pooled
		} else {
			f.buf = make([]byte, n)
		}
	}
	p := f.buf[:n]
	if _, err := io.ReadFull(f.r, p); err != nil {
		return 0, nil, fmt.Errorf("helper: truncated frame: %w", err)
	}
	return f.hdr[0], p, nil
}

// SocketPath returns the path of the named socket in dir.
func SocketPath(dir, name string) string { return filepath.Join(dir, name) }

// testHookListened runs in ListenHostSocket right after the socket is
// bound, where an agent racing the host could swap the path.
var testHookListened func(path string)

// ListenHostSocket listens on the host socket name (ModelSocket, MCPSocket,
// EgressSocket)
// in hostDir for the helper to dial: it removes a stale socket file, listens,
// and gives the socket to the sandbox user (uid:gid, mode 0600) so the
// non-root helper may connect. Pass uid -1 to keep the owner (a host that
// runs as the sandbox user itself). Close the listener to stop it; a later
// ListenHostSocket replaces it without touching the container.
//
// The agent can write hostDir, so nothing here follows the path after the
// bind: the mode is set on the socket's descriptor before the bind (the
// kernel gives the new file that mode), and the owner is changed through a
// descriptor of hostDir without following a link. If the agent swaps the
// socket for something else meanwhile, at worst a file of its own in its
// own mount gets the owner it already has, and the listen fails.
func ListenHostSocket(hostDir, name string, uid, gid int) (net.Listener, error) {
	path := SocketPath(hostDir, name)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("helper: remove stale %s: %w", path, err)
	}
	dirfd, err := syscall.Open(hostDir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("helper: open host dir %s: %w", hostDir, err)
	}
	defer func() { _ = syscall.Close(dirfd) }()
	// Bound as /proc/self/fd/N/name: each connection's server end lives in
	// the connecting sandbox's network namespace with the listener's
	// address, so /proc/net/unix in the sandbox shows that address; this
	// one names no host path.
	ln, err := listenSockAt(context.Background(), dirfd, name, 0o600)
	if err != nil {
		return nil, fmt.Errorf("helper: listen on %s: %w", path, err)
	}
	if testHookListened != nil {
		testHookListened(path)
	}
	// The name in the directory dirfd names: /proc/self/fd/N is that very
	// directory, and neither lstat nor lchown follows the final component.
	inDir := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
	fi, err := os.Lstat(inDir)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		_ = ln.Close()
		return nil, fmt.Errorf("helper: %s was replaced right after it was made (by the sandbox?); start the sandbox again: %w", path, errors.Join(err, ErrSocketReplaced))
	}
	if uid >= 0 {
		if err := os.Lchown(inDir, uid, gid); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("helper: give %s to the sandbox user %d:%d (run the gateway as root or as that user): %w", path, uid, gid, err)
		}
	}
	return &hostListener{Listener: ln, path: path}, nil
}

// hostListener removes its socket file when it closes: the listener was
// bound through a /proc/self/fd path that no longer names the directory
// by then. Remove does not follow a link the agent may have put there.
type hostListener struct {
	net.Listener
	path string
	once sync.Once
}

func (l *hostListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() {
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("helper: remove %s: %w", l.path, rerr)
		}
	})
	return err
}

// ErrSocketReplaced is wrapped by ListenHostSocket when the socket it made
// was no longer a socket when it came to give it to the sandbox user.
var ErrSocketReplaced = errors.New("host socket replaced")
