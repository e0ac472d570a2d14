package helper

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

// MaxMCPLine caps one newline-delimited JSON-RPC message on the MCP relay,
// in both directions and on both sides of the socket.
const MaxMCPLine = 8 << 20

// LineReader reads newline-terminated lines of at most a fixed size without
// ever buffering more than that: a longer line fails with ErrFrameTooLarge
// after at most max bytes were read.
type LineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// NewLineReader returns a reader of lines up to maxLine bytes (newline
// excluded).
func NewLineReader(r io.Reader, maxLine int) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10), max: maxLine}
}

// ReadLine returns the next line without its newline; the slice is valid
// until the next call. A last line without a newline is returned with a nil
// error; io.EOF follows.
func (l *LineReader) ReadLine() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		if len(l.buf)+len(frag) > l.max+1 || (len(l.buf)+len(frag) > l.max && !bytes.HasSuffix(frag, []byte{'\n'})) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrFrameTooLarge, l.max)
		}
		if need := len(l.buf) + len(frag); need > cap(l.buf) {
			// Double (append alone grows large slices by 1.25x, which
			// allocates several times the line on the way to the cap).
			nb := make([]byte, len(l.buf), min(max(2*cap(l.buf), need, 64<<10), l.max+1))
			copy(nb, l.buf)
			l.buf = nb
		}
		l.buf = append(l.buf, frag...)
		switch {
		case err == nil:
			return l.buf[:len(l.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) > 0:
			return l.buf, nil
		default:
			return nil, err
		}
	}
}

// MCPHello is the first line `agentbox-helper mcp` sends on mcp.sock.
type MCPHello struct {
	Version int    `json:"version"`
	Server  string `json:"server"`
	Token   string `json:"token"`
}

// TokenMatches compares the presented token with want in constant time.
func (h MCPHello) TokenMatches(want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(h.Token), []byte(want)) == 1
}

// mcpAck is the host's one-line answer to the hello.
type mcpAck struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// ReadMCPHello reads and decodes the relay's first line on the host side.
// The host checks TokenMatches and Server, answers with WriteMCPAck, then
// exchanges newline-delimited JSON-RPC on the same reader and connection.
func ReadMCPHello(r *LineReader) (MCPHello, error) {
	line, err := r.ReadLine()
	if err != nil {
		return MCPHello{}, fmt.Errorf("helper: mcp hello: %w", err)
	}
	var h MCPHello
	if err := json.Unmarshal(line, &h); err != nil {
		return MCPHello{}, fmt.Errorf("helper: mcp hello is not JSON: %w", err)
	}
	if h.Version != ProtocolVersion {
		return h, fmt.Errorf("helper: mcp hello: protocol version %d, want %d", h.Version, ProtocolVersion)
	}
	return h, nil
}

// WriteMCPAck answers a hello: nil accepts, an error refuses (its text goes
// to the relay's stderr, which the agent CLI logs; never put secrets in it).
func WriteMCPAck(w io.Writer, refuse error) error {
	a := mcpAck{OK: refuse == nil}
	if refuse != nil {
		a.Error = refuse.Error()
	}
	b, _ := json.Marshal(a)
	_, err := w.Write(append(b, '\n'))
	return err
}

// MCPRelayOptions configure RunMCPRelay.
type MCPRelayOptions struct {
	// Dir holds mcp.sock and, optionally, the token file (ContainerDir when
	// empty).
	Dir string
	// Server is the MCP server id the host should route to.
	Server string
	// Token is the per-request token; when empty it is read from the
	// AGENTBOX_TOKEN environment variable, then from Dir/token.
	Token string
	// Stdin and Stdout are the agent CLI's side of the stdio transport.
	Stdin  io.Reader
	Stdout io.Writer
	// MaxLine caps one message (MaxMCPLine when 0).
	MaxLine int
}

// ErrMCPRefused reports that the host refused the relay's hello.
var ErrMCPRefused = errors.New("helper: the host refused the mcp relay")

// RunMCPRelay is `agentbox-helper mcp`: it dials Dir/mcp.sock, presents the
// token and server id, then relays newline-delimited JSON-RPC between stdio
// and the socket until either side ends. A message over the cap ends the
// relay with ErrFrameTooLarge.
//
// It returns as soon as the relay is over, without waiting for a read of
// Stdin that may never return: when the host closes the connection, when
// Stdin ends and the host has answered what was sent, and at once when ctx
// ends (the CLI's SIGINT or SIGTERM at its exit). An MCP server that
// lingers costs every run: Claude Code escalates from SIGINT to SIGKILL
// over about half a second before it exits.
func RunMCPRelay(ctx context.Context, o MCPRelayOptions) error {
	if o.Dir == "" {
		o.Dir = ContainerDir
	}
	if o.MaxLine <= 0 {
		o.MaxLine = MaxMCPLine
	}
	if o.Server == "" {
		return errors.New("helper: mcp relay needs --server <id> (the server name in .mcp.json)")
	}
	conn, up, err := DialMCP(ctx, o)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()

	in, out := make(chan error, 1), make(chan error, 1)
	go func() {
		err := copyLines(conn, NewLineReader(o.Stdin, o.MaxLine))
		// Sent before the close that ends the other copy, so that its
		// end finds this error (a message over the cap) waiting.
		in <- err
		if hc, ok := conn.(halfCloser); ok && err == nil {
			_ = hc.CloseWrite()
		} else {
			_ = conn.Close()
		}
	}()
	go func() { out <- copyLines(o.Stdout, up) }()
	quiet := func(err error) error {
		select {
		case inErr := <-in:
			if inErr != nil {
				return inErr
			}
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		return err
	}
	for {
		select {
		case err := <-out:
			return quiet(err)
		case <-ctx.Done():
			return nil
		case err := <-in:
			if err != nil {
				return err
			}
			// Stdin ended: the host's answers to what was sent still go
			// out, until the host hangs up.
			in = nil
		}
	}
}

// DialMCP dials Dir/mcp.sock, presents the token and o.Server (an empty
// server id asks for every tool granted to the request, as the agent CLI
// does) and waits for the host's ack. On success the connection carries
// newline-delimited JSON-RPC; read it through the returned LineReader,
// which may already hold the host's first bytes. A refusal wraps
// ErrMCPRefused with the host's reason.
func DialMCP(ctx context.Context, o MCPRelayOptions) (net.Conn, *LineReader, error) {
	if o.Dir == "" {
		o.Dir = ContainerDir
	}
	if o.MaxLine <= 0 {
		o.MaxLine = MaxMCPLine
	}
	tok, err := relayToken(o)
	if err != nil {
		return nil, nil, err
	}
	conn, err := dialSock(ctx, o.Dir, MCPSocket)
	if err != nil {
		return nil, nil, fmt.Errorf("helper: mcp relay: dial host: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	fail := func(err error) (net.Conn, *LineReader, error) {
		_ = conn.Close()
		return nil, nil, err
	}
	b, _ := json.Marshal(MCPHello{Version: ProtocolVersion, Server: o.Server, Token: tok})
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return fail(fmt.Errorf("helper: mcp relay: send hello: %w", err))
	}
	up := NewLineReader(conn, o.MaxLine)
	line, err := up.ReadLine()
	if err != nil {
		return fail(fmt.Errorf("helper: mcp relay: no answer to hello: %w", err))
	}
	var ack mcpAck
	if err := json.Unmarshal(line, &ack); err != nil {
		return fail(fmt.Errorf("helper: mcp relay: malformed answer to hello: %w", err))
	}
	if !ack.OK {
		return fail(fmt.Errorf("%w: %s", ErrMCPRefused, ack.Error))
	}
	return conn, up, nil
}

// relayToken picks the token: option, environment, then the token file.
func relayToken(o MCPRelayOptions) (string, error) {
	if o.Token != "" {
		return o.Token, nil
	}
	if t := os.Getenv("AGENTBOX_TOKEN"); t != "" {
		return t, nil
	}
	b, err := os.ReadFile(SocketPath(o.Dir, TokenFile))
	if err != nil {
		return "", fmt.Errorf("helper: mcp relay: no token: set AGENTBOX_TOKEN or have the host write %s: %w", SocketPath(o.Dir, TokenFile), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// copyLines copies whole lines from r to w, each with its newline. It ends
// with nil at EOF.
func copyLines(w io.Writer, r *LineReader) error {
	for {
		line, err := r.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		line = append(line, '\n') // the buffer is the reader's own; append is safe
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
}
