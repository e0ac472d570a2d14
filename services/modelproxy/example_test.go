package modelproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/services/modelproxy"
)

// ExampleNew serves the proxy on a sandbox's model.sock; the container's
// agent presents the per-request token and the upstream sees the real key.
func ExampleNew() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("upstream key:", r.Header.Get("X-Api-Key"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","usage":{"input_tokens":12,"output_tokens":3}}`)
	}))
	defer upstream.Close()

	hostDir, _ := os.MkdirTemp("", "sandbox")
	defer func() { _ = os.RemoveAll(hostDir) }()
	sock := filepath.Join(hostDir, "model.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		panic(err)
	}
	p, err := modelproxy.New(modelproxy.Options{
		Upstream: upstream.URL, APIKey: "sk-connector-key", Token: "per-request-token",
		Budget: modelproxy.Budget{MaxRequests: 50, MaxTokens: 1_000_000},
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = p.Serve(ln) }()
	defer func() { _ = p.Close() }()

	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:4000/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-6"}`))
	req.Header.Set("X-Api-Key", "per-request-token")
	resp, err := c.Do(req)
	if err != nil {
		panic(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)
	fmt.Printf("metered: %+v\n", p.Usage())
	// Output:
	// upstream key: sk-connector-key
	// status: 200
	// metered: {InputTokens:12 OutputTokens:3 CacheCreationInputTokens:0 CacheReadInputTokens:0}
}
