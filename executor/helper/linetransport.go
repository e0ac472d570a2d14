package helper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// LineTransport is an MCP SDK transport over a connection that carries
// newline-delimited JSON-RPC after the hello, as mcp.sock does: one
// message per line, read through a LineReader, so a message over the
// reader's cap fails with ErrFrameTooLarge before more than the cap is
// buffered. The SDK's IOTransport would parse the stream a second time
// with its own decoder; reading whole lines first is both the size guard
// and the framing.
//
// Batches (a JSON array on one line) are not supported; MCP dropped them
// in protocol version 2025-06-18.
type LineTransport struct {
	lr   *LineReader
	conn io.WriteCloser
}

// NewLineTransport returns a transport reading messages from lr and
// writing them to conn, which Close closes (unblocking a pending read).
func NewLineTransport(lr *LineReader, conn io.WriteCloser) *LineTransport {
	return &LineTransport{lr: lr, conn: conn}
}

// Connect implements mcp.Transport; call it once.
func (t *LineTransport) Connect(context.Context) (mcp.Connection, error) {
	return &lineConn{lr: t.lr, conn: t.conn}, nil
}

// lineConn is the mcp.Connection of a LineTransport. Reads come from one
// goroutine (the SDK's reader); writes may be concurrent.
type lineConn struct {
	lr   *LineReader
	conn io.WriteCloser

	wmu sync.Mutex
	buf []byte
}

// Read returns the next non-blank line's message. A closed connection is
// io.EOF.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		line, err := c.lr.ReadLine()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				err = io.EOF
			}
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		// The line is the reader's buffer, reused on the next read.
		msg, err := jsonrpc.DecodeMessage(bytes.Clone(line))
		if err != nil {
			return nil, fmt.Errorf("helper: mcp: a line is not a JSON-RPC message: %w", err)
		}
		return msg, nil
	}
}

// Write sends msg as one line.
func (c *lineConn) Write(_ context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("helper: mcp: encode: %w", err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.buf = append(append(c.buf[:0], b...), '\n')
	_, err = c.conn.Write(c.buf)
	return err
}

// Close closes the connection.
func (c *lineConn) Close() error { return c.conn.Close() }

// SessionID implements mcp.Connection; stream connections have none.
func (c *lineConn) SessionID() string { return "" }
