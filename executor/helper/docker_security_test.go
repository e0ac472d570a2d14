package helper

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/services/modelproxy"
)

const (
	connectorKey = "sk-ant-api03-CONNECTOR-KEY-must-never-enter-the-sandbox"
	sandboxToken = "abx-tok-7f3c2a9e"
	modelPort    = 4000
)

// TestDockerModelTrafficOnlyThroughForwarder: a container with network none
// reaches a host HTTP server only through the helper's loopback forwarder
// and the model proxy on model.sock; a wrong token is refused; the
// connector key appears nowhere in the container (process environments,
// docker inspect, workspace, per-sandbox directory).
func TestDockerModelTrafficOnlyThroughForwarder(t *testing.T) {
	seen := make(chan string, 10)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Api-Key")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"hello from the host"}],"usage":{"input_tokens":7,"output_tokens":2}}`)
	}))
	defer upstream.Close()

	sb := startSandbox(t, sandboxOpts{serve: ServeOptions{ModelPort: modelPort}})
	p, err := modelproxy.New(modelproxy.Options{Upstream: upstream.URL, APIKey: connectorKey, Token: sandboxToken})
	require.NoError(t, err)
	ln, err := ListenHostSocket(sb.hostDir, ModelSocket, 1000, 1000)
	require.NoError(t, err)
	go func() { _ = p.Serve(ln) }()
	defer func() { _ = p.Close() }()

	wget := func(token, url string) (string, error) {
		var out bytes.Buffer
		res, err := sb.client.Exec(context.Background(), &executor.Cmd{
			Args:   []string{"sh", "-c", `wget -q -O - --header "x-api-key: $ANTHROPIC_API_KEY" --header "content-type: application/json" --post-data '{"model":"m","messages":[]}' "$URL" 2>&1`},
			Env:    []string{"ANTHROPIC_API_KEY=" + token, "URL=" + url},
			Stdout: &out, Timeout: 20 * time.Second,
		})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("wget exit %d", res.ExitCode)
		}
		return out.String(), err
	}

	base := fmt.Sprintf("http://127.0.0.1:%d/v1/messages", modelPort)
	out, err := wget(sandboxToken, base)
	require.NoError(t, err, out)
	assert.Contains(t, out, "hello from the host")
	assert.Equal(t, connectorKey, <-seen, "upstream gets the connector key")

	out, err = wget("abx-wrong-token", base)
	require.Error(t, err)
	assert.Contains(t, out, "401")
	assert.Len(t, p.Calls(), 1, "the wrong token never reached upstream")

	// The host server's own port is not reachable from the container.
	out, err = wget(sandboxToken, upstream.URL+"/v1/messages")
	require.Error(t, err, "direct access must fail: %s", out)
	var dev bytes.Buffer
	_, err = sb.client.Exec(context.Background(), &executor.Cmd{Args: []string{"cat", "/proc/net/dev"}, Stdout: &dev})
	require.NoError(t, err)
	assert.NotContains(t, dev.String(), "eth0", "network none: only lo")

	// The key in no process environment (the search string travels on stdin,
	// so no environment of the searching processes holds it).
	var hits bytes.Buffer
	res, err := sb.client.Exec(context.Background(), &executor.Cmd{
		Args:  []string{"sh", "-c", `read -r k; n=0; for f in /proc/[0-9]*/environ; do n=$((n+1)); if grep -qF -- "$k" "$f" 2>/dev/null; then echo "$f"; fi; done; echo "scanned $n" >&2`},
		Stdin: strings.NewReader(connectorKey + "\n"), Stdout: &hits, Stderr: io.Discard,
	})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Empty(t, hits.String(), "processes whose environment holds the key")

	inspect, err := exec.Command("docker", "inspect", sb.id).Output()
	require.NoError(t, err)
	assert.NotContains(t, string(inspect), connectorKey)
	for _, dir := range []string{sb.work, sb.hostDir} {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(path)
				assert.NotContains(t, string(b), connectorKey, path)
			}
			return nil
		})
	}
}

// TestDockerMCPRelay: `agentbox-helper mcp` relays JSON-RPC from the
// container to a host responder on mcp.sock, presenting the token; a wrong
// token is refused; a 300 MB message without newline is refused at the cap.
func TestDockerMCPRelay(t *testing.T) {
	sb := startSandbox(t, sandboxOpts{})
	ln, err := ListenHostSocket(sb.hostDir, MCPSocket, 1000, 1000)
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	received := make(chan int64, 10)
	go serveMCPResponder(ln, sandboxToken, received)

	relay := func(token, input string) (string, string, int) {
		var out, errb bytes.Buffer
		res, err := sb.client.Exec(context.Background(), &executor.Cmd{
			Args:  []string{"sh", "-c", "exec " + helperInImage + " mcp --server demo"},
			Env:   []string{"AGENTBOX_TOKEN=" + token},
			Stdin: strings.NewReader(input), Stdout: &out, Stderr: &errb, Timeout: time.Minute,
		})
		require.NoError(t, err)
		return out.String(), errb.String(), res.ExitCode
	}
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n"
	out, errs, code := relay(sandboxToken, in)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"demo"},"capabilities":{"tools":{}}}}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`+"\n", out)

	_, errs, code = relay("abx-wrong", in)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "refused")

	// 300 MB with no newline, produced inside the container.
	var errb bytes.Buffer
	start := time.Now()
	res, err := sb.client.Exec(context.Background(), &executor.Cmd{
		Args:   []string{"sh", "-c", "head -c 300000000 /dev/zero | tr '\\0' a | " + helperInImage + " mcp --server demo"},
		Env:    []string{"AGENTBOX_TOKEN=" + sandboxToken},
		Stderr: &errb, Timeout: time.Minute,
	})
	require.NoError(t, err)
	assert.Equal(t, 1, res.ExitCode)
	assert.Contains(t, errb.String(), "line longer than 8388608 bytes")
	t.Logf("300 MB line refused by the relay after %s: %s", time.Since(start), strings.TrimSpace(errb.String()))
}

// serveMCPResponder is a minimal host MCP endpoint: it checks the hello,
// then answers initialize and tools/list, line by line with the cap.
func serveMCPResponder(ln net.Listener, token string, received chan<- int64) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = conn.Close() }()
			lr := NewLineReader(conn, MaxMCPLine)
			h, err := ReadMCPHello(lr)
			if err != nil {
				return
			}
			if !h.TokenMatches(token) || h.Server != "demo" {
				_ = WriteMCPAck(conn, fmt.Errorf("unknown token or server %q", h.Server))
				return
			}
			_ = WriteMCPAck(conn, nil)
			var n int64
			defer func() { received <- n }()
			for {
				line, err := lr.ReadLine()
				if err != nil {
					return
				}
				n += int64(len(line))
				var answer string
				switch {
				case bytes.Contains(line, []byte(`"initialize"`)):
					answer = `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"demo"},"capabilities":{"tools":{}}}}`
				case bytes.Contains(line, []byte(`"tools/list"`)):
					answer = `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`
				default:
					continue
				}
				if _, err := io.WriteString(conn, answer+"\n"); err != nil {
					return
				}
			}
		}()
	}
}

// TestHostSocketRefusesOversizedFrame: a 300 MB message with no newline
// written to a host socket (mcp.sock) is refused at the cap: the host reads
// at most the cap plus one buffer, keeps its heap bounded and hangs up.
func TestHostSocketRefusesOversizedFrame(t *testing.T) {
	dir := t.TempDir()
	ln, err := ListenHostSocket(dir, MCPSocket, -1, -1)
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	type result struct {
		read int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer func() { _ = conn.Close() }()
		cr := &countingReader{r: conn}
		lr := NewLineReader(cr, MaxMCPLine)
		_, err = lr.ReadLine()
		done <- result{read: cr.n, err: err}
	}()
	alloc0 := totalAlloc()
	conn, err := net.Dial("unix", SocketPath(dir, MCPSocket))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	var sent int64
	var werr error
	for sent < 300_000_000 && werr == nil {
		var n int
		n, werr = conn.Write(chunk)
		sent += int64(n)
	}
	r := <-done
	require.ErrorIs(t, r.err, ErrFrameTooLarge)
	assert.LessOrEqual(t, r.read, int64(MaxMCPLine+128<<10), "the host read no more than the cap plus its buffer")
	assert.Error(t, werr, "the sender sees the host hang up")
	assert.Less(t, sent, int64(300_000_000))
	alloc := totalAlloc() - alloc0
	t.Logf("sender wrote %d bytes before the hang-up; host read %d; allocated %d KiB in all", sent, r.read, alloc>>10)
	assert.Less(t, alloc, uint64(3*MaxMCPLine), "allocation bounded by the cap, not by the 300 MB sent")
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
