package openai_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// naiveGateway is a gateway's own chat handler as most Go gateways write
// it: encoding/json into a struct (names matched case-insensitively, the
// last duplicate kept, invalid UTF-8 replaced), and every assistant the
// gateway knows served from its connector, sandboxed ones included. It
// records the models it served.
type naiveGateway struct {
	mu     sync.Mutex
	served []string
	bodies [][]byte
}

func (g *naiveGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	g.served = append(g.served, req.Model)
	g.bodies = append(g.bodies, b)
	g.mu.Unlock()
	_, _ = io.WriteString(w, `{"own":true}`)
}

func (g *naiveGateway) reset() (served []string, bodies [][]byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	served, bodies, g.served, g.bodies = g.served, g.bodies, nil, nil
	return served, bodies
}

// readingServer is the adapter in front of a naiveGateway, with "coder"
// sandboxed and "qa" plain; sandboxed counts the requests agentbox
// answered.
func readingServer(t *testing.T, opts ...func(*openai.Options)) (*httptest.Server, *naiveGateway, *int) {
	t.Helper()
	var mu sync.Mutex
	sandboxed := 0
	h := middleware.HandlerFunc(func(_ context.Context, req *middleware.Request, _ middleware.Emit) (*middleware.Response, error) {
		mu.Lock()
		sandboxed++
		mu.Unlock()
		return &middleware.Response{Content: "from the sandbox", FinishReason: executor.FinishStop}, nil
	})
	cat, err := middleware.NewCatalog(
		&middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Runner: "scripted"}},
		&middleware.Assistant{ID: "qa"})
	require.NoError(t, err)
	o := openai.Options{Handler: h, Catalog: cat, MaxBodyBytes: 1 << 20, Sandboxes: noSandboxes{}}
	for _, f := range opts {
		f(&o)
	}
	own := &naiveGateway{}
	srv := httptest.NewServer(openai.Middleware(o)(own))
	t.Cleanup(srv.Close)
	return srv, own, &sandboxed
}

// noSandboxes is a SandboxManager that refuses everything: the tests here
// only need the sandbox API's routes to exist.
type noSandboxes struct{ middleware.SandboxManager }

// send posts body to path with headers (pairs) and returns the status and
// the answer.
func send(t *testing.T, srv *httptest.Server, path string, body []byte, headers ...string) (int, string) {
	t.Helper()
	r := postTo(t, srv, path, string(body), headers...)
	return r.StatusCode, string(r.Body)
}

const msgs = `"messages":[{"role":"user","content":"hi"}]`

// ambiguous are bodies that name the sandboxed "coder" to some reader and
// something else (or nothing) to another. Each must be refused, never
// answered by the gateway's own handler as coder.
var ambiguous = map[string]string{
	"duplicate model, sandboxed last":  `{"model":"nonexistent","model":"coder",` + msgs + `}`,
	"duplicate model, sandboxed first": `{"model":"coder","model":"qa",` + msgs + `}`,
	"case variant":                     `{"model":"nonexistent","Model":"coder",` + msgs + `}`,
	"case variant alone":               `{"MODEL":"coder",` + msgs + `}`,
	"escaped name duplicate":           `{"model":"nonexistent","mod\u0065l":"coder",` + msgs + `}`,
	"escaped name alone":               `{"mod\u0065l":"qa","model":"coder",` + msgs + `}`,
	"punctuation variant":              `{"mo_del":"coder","model":"qa",` + msgs + `}`,
	"invalid utf-8 in value":           "{\"model\":\"coder\xff\"," + msgs + `}`,
	"invalid utf-8 in name":            "{\"model\xff\":\"coder\"," + msgs + `}`,
	"lone surrogate":                   `{"model":"coder\ud800",` + msgs + `}`,
	"byte order mark":                  "\xef\xbb\xbf{\"model\":\"coder\"," + msgs + `}`,
	"comment":                          `{"model":"coder", /* c */ ` + msgs + `}`,
	"line comment":                     "{\"model\":\"qa\", // \"model\":\"coder\"\n" + msgs + `}`,
	"trailing garbage":                 `{"model":"qa",` + msgs + `} garbage`,
	"trailing second object":           `{"model":"qa",` + msgs + `}{"model":"coder"}`,
	"trailing comma":                   `{"model":"coder",` + msgs + `,}`,
	"single quotes":                    `{'model':'coder',` + msgs + `}`,
	"NaN":                              `{"model":"coder","temperature":NaN,` + msgs + `}`,
	"not an object":                    `[{"model":"coder",` + msgs + `}]`,
	"model an array":                   `{"model":["coder"],` + msgs + `}`,
	"model null":                       `{"model":null,` + msgs + `}`,
	"loose twin: case":                 `{"model":"Coder",` + msgs + `}`,
	"loose twin: space":                `{"model":" coder ",` + msgs + `}`,
	"nested duplicate":                 `{"model":"coder","messages":[{"role":"user","role":"system","content":"hi"}]}`,
	"truncated":                        `{"model":"coder",`,
	"empty":                            ``,
	"deep nesting":                     `{"model":"qa","x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `,` + msgs + `}`,
}

// TestOneReadingRefusesAmbiguousBodies: a body that two readers could
// read differently never reaches the gateway's own handler, which decodes
// with encoding/json: the adapter refuses it with a 400 in OpenAI's
// shape that says what to fix.
func TestOneReadingRefusesAmbiguousBodies(t *testing.T) {
	srv, own, sandboxed := readingServer(t)
	for name, body := range ambiguous {
		t.Run(name, func(t *testing.T) {
			code, got := send(t, srv, "/v1/chat/completions", []byte(body), "X-Agentbox-User", "alice", "X-Agentbox-Chat", "c1")
			served, _ := own.reset()
			assert.Empty(t, served, "the gateway's handler got the request: %s", got)
			assert.Equal(t, http.StatusBadRequest, code, got)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(got), &e), got)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			assert.NotEmpty(t, e.Error.Message)
			t.Log(e.Error.Message)
		})
	}
	assert.Zero(t, *sandboxed)
}

// TestOneReadingTooLargeOrCompressed: a body the adapter cannot read in
// full (over MaxBodyBytes) or reads only compressed is refused with 413
// or 400, whatever it names; Next never sees it.
func TestOneReadingTooLargeOrCompressed(t *testing.T) {
	srv, own, sandboxed := readingServer(t)
	large := []byte(`{"model":"coder",` + msgs + `,"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
	code, got := send(t, srv, "/v1/chat/completions", large)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, got)
	assert.Contains(t, got, "request_too_large")
	assert.Contains(t, got, "MaxBodyBytes")

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, `{"model":"coder",`+msgs+`}`)
	require.NoError(t, zw.Close())
	code, got = send(t, srv, "/v1/chat/completions", gz.Bytes(), "Content-Encoding", "gzip")
	assert.Equal(t, http.StatusBadRequest, code, got)
	assert.Contains(t, got, "uncompressed")

	served, _ := own.reset()
	assert.Empty(t, served)
	assert.Zero(t, *sandboxed)
}

// TestOneReadingRoutingHeaders: the headers that select user, chat and
// sandbox are refused when sent twice (any case: net/http merges them) or
// under a look-alike name, on chat completions and the sandbox API.
func TestOneReadingRoutingHeaders(t *testing.T) {
	srv, _, sandboxed := readingServer(t)
	body := []byte(`{"model":"coder",` + msgs + `}`)
	for name, h := range map[string][]string{
		"user twice":            {"X-Agentbox-User", "alice", "X-Agentbox-User", "bob", "X-Agentbox-Chat", "c1"},
		"user twice, cased":     {"X-Agentbox-User", "alice", "x-agentbox-user", "bob", "X-Agentbox-Chat", "c1"},
		"chat twice":            {"X-Agentbox-User", "alice", "X-Agentbox-Chat", "c1", "X-AGENTBOX-CHAT", "c2"},
		"sandbox twice":         {"X-Agentbox-User", "alice", "X-Agentbox-Chat", "c1", "X-Agentbox-Sandbox", "a", "X-Agentbox-Sandbox", "b"},
		"underscore look-alike": {"X-Agentbox-User", "alice", "X_Agentbox_User", "bob", "X-Agentbox-Chat", "c1"},
	} {
		t.Run(name, func(t *testing.T) {
			code, got := send(t, srv, "/v1/chat/completions", body, h...)
			assert.Equal(t, http.StatusBadRequest, code, got)
			assert.Contains(t, got, "X-Agentbox-")
		})
	}
	assert.Zero(t, *sandboxed, "no refused request ran")

	code, got := send(t, srv, "/v1/sandboxes", []byte(`{"model":"coder"}`), "X-Agentbox-User", "alice", "x-agentbox-user", "bob")
	assert.Equal(t, http.StatusBadRequest, code, got)
	assert.Contains(t, got, "sent 2 times")
}

// TestOneReadingSandboxAPI: the client sandbox API reads its body the
// same way: one JSON object and nothing after it, no duplicate or
// look-alike names.
func TestOneReadingSandboxAPI(t *testing.T) {
	srv, _, _ := readingServer(t)
	for name, body := range map[string]string{
		"trailing garbage":  `{"model":"coder"} garbage`,
		"second object":     `{"model":"coder"}{"model":"qa"}`,
		"duplicate":         `{"model":"qa","model":"coder"}`,
		"case variant":      `{"Model":"coder"}`,
		"duplicate tag":     `{"model":"coder","tags":{"a":"1","a":"2"}}`,
		"invalid utf-8 tag": "{\"model\":\"coder\",\"tags\":{\"a\":\"\xff\"}}",
		"unknown field":     `{"model":"coder","ttl":5}`,
	} {
		t.Run(name, func(t *testing.T) {
			code, got := send(t, srv, "/v1/sandboxes", []byte(body), "X-Agentbox-User", "alice")
			assert.Equal(t, http.StatusBadRequest, code, got)
			assert.Contains(t, got, "not a valid sandbox request")
		})
	}
}

// TestOneReadingGuardedPaths: the other model APIs' paths pass a body
// naming another model to the gateway's handler byte for byte, and refuse
// one that names a sandboxed assistant (which answers on the doors only)
// or that cannot be read as one meaning.
func TestOneReadingGuardedPaths(t *testing.T) {
	srv, own, sandboxed := readingServer(t)
	for _, path := range []string{"/v1/completions", "/v1/embeddings"} {
		plain := []byte(`{"model":"gpt-own",  "input":"hi"}`)
		code, got := send(t, srv, path, plain)
		assert.Equal(t, http.StatusOK, code, got)
		_, bodies := own.reset()
		require.Len(t, bodies, 1, path)
		assert.Equal(t, plain, bodies[0], "%s: byte for byte", path)

		for _, body := range []string{`{"model":"coder","input":"hi"}`, `{"model":"x","model":"coder"}`, `{"Model":"coder"}`, `{"model":"coder"} x`} {
			code, got = send(t, srv, path, []byte(body))
			assert.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, code, "%s %s: %s", path, body, got)
			served, _ := own.reset()
			assert.Empty(t, served, "%s %s", path, body)
		}
	}
	assert.Zero(t, *sandboxed)
}

// TestOneReadingDoors: the Responses and Messages doors read their bodies
// as Chat Completions does: another model's body reaches the gateway's
// handler byte for byte, a sandboxed assistant's is answered, and a body
// that cannot be read as one meaning is refused in the door's own error
// shape, never passed on.
func TestOneReadingDoors(t *testing.T) {
	srv, own, sandboxed := readingServer(t)
	for path, tc := range map[string]struct{ plain, served, shape string }{
		"/v1/responses": {`{"model":"gpt-own",  "input":"hi"}`, `{"model":"coder","input":"hi","user":"alice:c1"}`, `"error":{"message"`},
		"/v1/messages": {`{"model":"claude-own","max_tokens":9,` + msgs + `}`,
			`{"model":"coder","max_tokens":9,` + msgs + `,"metadata":{"user_id":"alice:c1"}}`, `"type":"error","error":{"type":"invalid_request_error"`},
	} {
		code, got := send(t, srv, path, []byte(tc.plain))
		assert.Equal(t, http.StatusOK, code, got)
		_, bodies := own.reset()
		require.Len(t, bodies, 1, path)
		assert.Equal(t, tc.plain, string(bodies[0]), "%s: byte for byte", path)

		code, got = send(t, srv, path, []byte(tc.served))
		assert.Equal(t, http.StatusOK, code, "%s: %s", path, got)
		assert.Contains(t, got, "from the sandbox")
		served, _ := own.reset()
		assert.Empty(t, served)

		for _, body := range []string{`{"model":"x","model":"coder"}`, `{"Model":"coder"}`, `{"model":"coder"} x`,
			`{"model":"coder","input":"a","Input":"b"}`, "{\"model\":\"co\xffder\"}",
			`{"model":"coder","metadata":{"user_id":"alice:c1","User_Id":"bob:c1"},` + msgs + `}`,
			`{"model":"coder","metadata":{"user_id":"alice:c1","user_id":"bob:c1"},` + msgs + `}`} {
			code, got = send(t, srv, path, []byte(body), "X-Agentbox-User", "alice", "X-Agentbox-Chat", "c1")
			assert.Equal(t, http.StatusBadRequest, code, "%s %s: %s", path, body, got)
			assert.Contains(t, got, tc.shape, "%s %s", path, body)
			served, _ := own.reset()
			assert.Empty(t, served, "%s %s", path, body)
		}
		code, got = send(t, srv, path, []byte(tc.served), "X-Agentbox-User", "alice", "x-agentbox-user", "bob")
		assert.Equal(t, http.StatusBadRequest, code, got)
		assert.Contains(t, got, "sent 2 times")
		code, got = send(t, srv, path, []byte(tc.served), "X_Agentbox_User", "bob")
		assert.Equal(t, http.StatusBadRequest, code, got)
	}
	assert.Equal(t, 2, *sandboxed, "one run per door; no refused request ran")
}

// TestOneReadingPathVariants: a path that a looser router behind the
// adapter would take for one of the adapter's routes is refused, not
// passed on.
func TestOneReadingPathVariants(t *testing.T) {
	srv, own, _ := readingServer(t)
	body := []byte(`{"model":"coder",` + msgs + `}`)
	for _, p := range []string{"/v1/chat/completions/", "/V1/Chat/Completions", "/v1/chat%2Fcompletions", "/v1/chat/completions;x", "/v1/Responses"} {
		code, got := send(t, srv, p, body)
		assert.Equal(t, http.StatusNotFound, code, "%s: %s", p, got)
		served, _ := own.reset()
		assert.Empty(t, served, p)
	}
	// Other paths are the gateway's.
	code, _ := send(t, srv, "/v1/chat/other", body)
	assert.Equal(t, http.StatusOK, code)
}

// TestPassUnreadable: a gateway whose own handler refuses unreadable
// bodies itself may have them passed on byte for byte; a body that names
// a sandboxed assistant exactly is still answered by agentbox.
func TestPassUnreadable(t *testing.T) {
	srv, own, sandboxed := readingServer(t, func(o *openai.Options) { o.PassUnreadable = true })
	for _, body := range []string{`not json at all`, `{"model":"qa",` + msgs + `} trailing`, `{"model":"qa","model":"qa2"}`} {
		code, got := send(t, srv, "/v1/chat/completions", []byte(body))
		_, bodies := own.reset()
		if code == http.StatusOK {
			require.Len(t, bodies, 1, body)
			assert.Equal(t, body, string(bodies[0]), "byte for byte")
		} else {
			assert.Equal(t, http.StatusBadRequest, code, "the naive gateway's own refusal: %s", got)
		}
	}
	large := `{"model":"qa",` + msgs + `,"pad":"` + strings.Repeat("x", 2<<20) + `"}`
	code, _ := send(t, srv, "/v1/chat/completions", []byte(large))
	assert.Equal(t, http.StatusOK, code)
	_, bodies := own.reset()
	require.Len(t, bodies, 1)
	assert.Equal(t, large, string(bodies[0]), "a body over the cap is passed on whole")

	code, got := send(t, srv, "/v1/chat/completions", []byte(`{"model":"coder",`+msgs+`}`), "X-Agentbox-User", "alice", "X-Agentbox-Chat", "c1")
	assert.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, 1, *sandboxed)
}
