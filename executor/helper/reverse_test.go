package helper

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// startReverse runs a reverse-mode helper with its model relay on
// modelPort and returns how the host dials its exec port, and its Dir.
func startReverse(t *testing.T, modelPort int) (func(context.Context) (net.Conn, error), string) {
	t.Helper()
	c, _, dir := startPortDirs(t, ServerOptions{Reverse: true, ModelPort: modelPort})
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", c.sock)
	}, dir
}

// TestReverseRelay: in reverse mode the model port and mcp.sock reach the
// host through connections it parked on the exec port, as the Kubernetes
// backend's port forward does; HTTP keep-alive and several connections at
// once work, and a park for an unknown name is refused.
func TestReverseRelay(t *testing.T) {
	modelPort := freePort(t)
	dial, dir := startReverse(t, modelPort)
	model, err := ListenReverse(dial, ModelSocket, 2)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprintf(w, "host saw %s %s %q", r.Method, r.URL.Path, body)
	})}
	go func() { _ = srv.Serve(model) }()
	t.Cleanup(func() { _ = srv.Close(); _ = model.Close() })

	// The agent's side: plain HTTP to the loopback model port.
	url := "http://127.0.0.1:" + strconv.Itoa(modelPort)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 5 {
		resp, err := client.Post(url+"/v1/messages", "text/plain", strings.NewReader(fmt.Sprint("call ", i)))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, fmt.Sprintf("host saw POST /v1/messages %q", fmt.Sprint("call ", i)), string(b))
	}
	done := make(chan error, 4)
	for range 4 {
		go func() {
			resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get(url + "/parallel")
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
	}
	for range 4 {
		require.NoError(t, <-done)
	}

	// mcp.sock is the helper's own in reverse mode.
	mcp, err := ListenReverse(dial, MCPSocket, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mcp.Close() })
	go func() {
		conn, err := mcp.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		_, _ = conn.Write([]byte("ack " + line))
		_ = conn.Close()
	}()
	conn, err := net.Dial("unix", SocketPath(dir, MCPSocket))
	require.NoError(t, err)
	_, err = conn.Write([]byte("hello\n"))
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	require.NoError(t, err)
	assert.Equal(t, "ack hello\n", string(got))

	_, err = ListenReverse(dial, "../etc/passwd", 1)
	assert.Error(t, err)
	raw, err := dial(context.Background())
	require.NoError(t, err)
	require.NoError(t, writeFrame(raw, framePark, []byte(`{"name":"other.sock"}`)))
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = raw.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "a park for an unknown name is closed")
}

// TestReverseListenerCloses: Close returns while connections are being
// dialled or sit parked in a helper that never answers.
func TestReverseListenerCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }() // never answers
		}
	}()
	for i := range 50 {
		l, err := ListenReverse(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", ln.Addr().String())
		}, ModelSocket, 2)
		require.NoError(t, err)
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		done := make(chan struct{})
		go func() { _ = l.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Close hangs", i)
		}
	}
}

// TestReverseDropsConnectionsTheHostClosed: connections a host parked and
// then closed (the previous turn's route, in a pod kept for the next
// turn) leave the pool at once, so the next agent connection reaches the
// route open now instead of a dead end.
func TestReverseDropsConnectionsTheHostClosed(t *testing.T) {
	modelPort := freePort(t)
	dial, _ := startReverse(t, modelPort)
	old, err := ListenReverse(dial, ModelSocket, 2)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // let it park its connections
	require.NoError(t, old.Close())

	route, err := ListenReverse(dial, ModelSocket, 2)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "the open route")
	})}
	go func() { _ = srv.Serve(route) }()
	t.Cleanup(func() { _ = srv.Close(); _ = route.Close() })
	for i := range 3 {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(modelPort) + "/")
		require.NoError(t, err, "connection %d", i)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, "the open route", string(b))
	}
}
