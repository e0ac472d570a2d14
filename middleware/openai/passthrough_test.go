package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// ownGateway is a gateway's own handler: it serves chat completions for
// its models and its model list, and records what it got.
type ownGateway struct {
	bodies [][]byte
	paths  []string
}

func (g *ownGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.bodies = append(g.bodies, b)
	g.paths = append(g.paths, r.Method+" "+r.URL.Path)
	switch r.URL.Path {
	case "/v1/models":
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-own","object":"model","owned_by":"gateway","extra":1},{"id":"coder","object":"model","owned_by":"gateway"}]}`)
	case "/v1/chat/completions":
		_, _ = io.WriteString(w, `{"own":true}`)
	default:
		http.NotFound(w, r)
	}
}

func TestMiddlewarePassesEverythingElseThrough(t *testing.T) {
	own := &ownGateway{}
	sandboxed := 0
	h := middleware.HandlerFunc(func(_ context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		sandboxed++
		_ = emit(executor.Event{Kind: executor.EventText, Text: "from the sandbox"})
		return &middleware.Response{Content: "from the sandbox", FinishReason: executor.FinishStop}, nil
	})
	cat, err := middleware.NewCatalog(
		&middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Runner: "scripted"}},
		&middleware.Assistant{ID: "qa"})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/", openai.Middleware(openai.Options{Handler: h, Catalog: cat})(own))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, got := do("POST", "/v1/chat/completions", `{"model":"coder","messages":[{"role":"user","content":"hi"}],"user":"alice:1"}`)
	assert.Equal(t, 200, code, got)
	assert.Contains(t, got, "from the sandbox")
	assert.Equal(t, 1, sandboxed)
	assert.Empty(t, own.bodies, "a sandboxed request never reaches the gateway's handler")

	// Plain requests reach the gateway byte for byte: odd spacing, a
	// plain assistant of the catalog, unknown models, no model.
	plain := []string{
		`{ "model" : "gpt-own",  "messages":[{"role":"user","content":"hi"}], "stream":true }`,
		`{"model":"qa","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"nobody","messages":[]}`,
		`{"messages":[]}`,
	}
	for i, b := range plain {
		code, got := do("POST", "/v1/chat/completions", b)
		assert.Equal(t, 200, code)
		assert.Equal(t, `{"own":true}`, got)
		require.Len(t, own.bodies, i+1)
		assert.True(t, bytes.Equal([]byte(b), own.bodies[i]), "request %d reaches the gateway unchanged", i)
	}
	assert.Equal(t, 1, sandboxed)

	// A body the adapter cannot read as one meaning (not JSON, larger than
	// the body cap) could name a sandboxed assistant to the gateway's
	// reader: refused by default (reading_test.go), passed on byte for
	// byte with PassUnreadable, for a gateway whose handler refuses them
	// itself.
	large := `{"model":"gpt-own","messages":[{"role":"user","content":"` + strings.Repeat("x", 9<<20) + `"}]}`
	unreadable := []string{`not json at all`, large}
	for _, b := range unreadable {
		code, _ := do("POST", "/v1/chat/completions", b)
		assert.Contains(t, []int{400, 413}, code)
	}
	require.Len(t, own.bodies, len(plain), "refused bodies never reach the gateway")
	loose := httptest.NewServer(openai.Middleware(openai.Options{Handler: h, Catalog: cat, PassUnreadable: true})(own))
	defer loose.Close()
	for i, b := range unreadable {
		resp, err := http.Post(loose.URL+"/v1/chat/completions", "application/json", strings.NewReader(b))
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, `{"own":true}`, string(got))
		require.Len(t, own.bodies, len(plain)+i+1)
		assert.True(t, bytes.Equal([]byte(b), own.bodies[len(plain)+i]), "unreadable request %d reaches the gateway unchanged", i)
	}
	assert.Equal(t, 1, sandboxed)

	code, got = do("GET", "/v1/models", "")
	assert.Equal(t, 200, code)
	var list struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(got), &list), got)
	ids := map[string]map[string]any{}
	for _, m := range list.Data {
		ids[m["id"].(string)] = m
	}
	assert.Len(t, list.Data, 3, "coder, qa and the gateway's gpt-own; coder once: %s", got)
	assert.Equal(t, true, ids["coder"]["sandbox"], "the catalog's entry wins")
	assert.Equal(t, float64(1), ids["gpt-own"]["extra"], "the gateway's entries are kept as they are")

	code, _ = do("GET", "/v1/models/gpt-own", "")
	assert.Equal(t, 404, code, "a model id the catalog does not have is the gateway's to answer")
	assert.Equal(t, "GET /v1/models/gpt-own", own.paths[len(own.paths)-1])
	code, _ = do("GET", "/v1/embeddings", "")
	assert.Equal(t, 404, code)
	assert.Equal(t, "GET /v1/embeddings", own.paths[len(own.paths)-1], "other paths reach the gateway")
}

// TestMiddlewareSlowBodyTimesOut: in front of a gateway's own handler, the
// body the middleware must read to route the request is bounded too: a
// client trickling it is answered 408 (code request_timeout) once the body
// timeout passes, and the gateway's handler never sees the request.
func TestMiddlewareSlowBodyTimesOut(t *testing.T) {
	own := &ownGateway{}
	cat, err := middleware.NewCatalog(&middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Runner: "scripted"}})
	require.NoError(t, err)
	h := middleware.HandlerFunc(func(context.Context, *middleware.Request, middleware.Emit) (*middleware.Response, error) {
		return &middleware.Response{Content: "ok", FinishReason: executor.FinishStop}, nil
	})
	srv := httptest.NewServer(openai.Middleware(openai.Options{Handler: h, Catalog: cat, BodyTimeout: 100 * time.Millisecond})(own))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second))) // a backstop, not the assertion
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers while the body is still owed")
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	assert.Contains(t, string(b), "request_timeout")
	assert.Empty(t, own.bodies, "the gateway's handler never got the request")

	// A body sent at once still reaches either side.
	for model, want := range map[string]string{"coder": `"ok"`, "gpt-own": `{"own":true}`} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"user":"alice:1"}`))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		assert.Contains(t, string(b), want)
	}
}
