package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socketPair returns both ends of a unix socket connection.
func socketPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err = net.Dial("unix", ln.Addr().String())
	require.NoError(t, err)
	b = <-accepted
	require.NotNil(t, b)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

// lineConnOf connects a LineTransport over c with a cap of maxLine.
func lineConnOf(t *testing.T, c net.Conn, maxLine int) *lineConn {
	t.Helper()
	conn, err := NewLineTransport(NewLineReader(c, maxLine), c).Connect(context.Background())
	require.NoError(t, err)
	return conn.(*lineConn)
}

func TestLineTransportReadsOneMessagePerLine(t *testing.T) {
	a, b := socketPair(t)
	lc := lineConnOf(t, a, 1024)
	_, err := io.WriteString(b, "\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n  \n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
	require.NoError(t, err)
	msg, err := lc.Read(context.Background())
	require.NoError(t, err)
	req, ok := msg.(*jsonrpc.Request)
	require.True(t, ok, "%T", msg)
	assert.Equal(t, "tools/list", req.Method)
	assert.True(t, req.IsCall())
	msg, err = lc.Read(context.Background())
	require.NoError(t, err, "blank lines are skipped")
	assert.Equal(t, "notifications/initialized", msg.(*jsonrpc.Request).Method)

	_, err = io.WriteString(b, "not json\n")
	require.NoError(t, err)
	_, err = lc.Read(context.Background())
	assert.ErrorContains(t, err, "a line is not a JSON-RPC message")
}

func TestLineTransportRefusesAMessageOverTheCap(t *testing.T) {
	a, b := socketPair(t)
	lc := lineConnOf(t, a, 1024)
	go func() {
		_, _ = io.WriteString(b, `{"jsonrpc":"2.0","method":"x","params":{"p":"`+strings.Repeat("x", 4096)+"\"}}\n")
	}()
	_, err := lc.Read(context.Background())
	assert.ErrorIs(t, err, ErrFrameTooLarge)
}

func TestLineTransportWritesWholeLinesConcurrently(t *testing.T) {
	a, b := socketPair(t)
	lc := lineConnOf(t, a, 1<<20)
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id, _ := jsonrpc.MakeID(float64(i))
			res, _ := json.Marshal(map[string]string{"text": strings.Repeat(fmt.Sprint(i%10), 10_000)})
			assert.NoError(t, lc.Write(context.Background(), &jsonrpc.Response{ID: id, Result: res}))
		})
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(b)
	sc.Buffer(nil, 1<<20)
	for len(seen) < n && sc.Scan() {
		msg, err := jsonrpc.DecodeMessage(sc.Bytes())
		require.NoError(t, err, "every line is one whole message")
		seen[fmt.Sprint(msg.(*jsonrpc.Response).ID.Raw())] = true
	}
	require.NoError(t, sc.Err())
	wg.Wait()
	assert.Len(t, seen, n)
}

func TestLineTransportCloseEndsARead(t *testing.T) {
	a, _ := socketPair(t)
	lc := lineConnOf(t, a, 1024)
	done := make(chan error, 1)
	go func() {
		_, err := lc.Read(context.Background())
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, lc.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, io.EOF)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the read")
	}
	assert.Empty(t, lc.SessionID())
}
