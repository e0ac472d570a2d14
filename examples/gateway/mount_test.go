package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/middleware/openai"
)

// TestMountInFrontOfAServeMux: a gateway whose http.ServeMux already
// serves /v1/chat/completions and /v1/models for its own models gains the
// sandboxed assistants by wrapping its mux in one call. A sandboxed
// request runs the real CLI in a container; a plain one reaches the
// gateway's own handler byte for byte; /v1/models lists both.
func TestMountInFrontOfAServeMux(t *testing.T) {
	g, data := startGateway(t)

	var mu sync.Mutex
	var got [][]byte
	own := http.NewServeMux()
	own.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"own-1","object":"chat.completion","model":"gpt-own","choices":[{"index":0,"message":{"role":"assistant","content":"from the gateway"},"finish_reason":"stop"}]}`)
	})
	own.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-own","object":"model","owned_by":"gateway"}]}`)
	})

	// The one call.
	srv := httptest.NewServer(g.stack.Middleware(own))
	defer srv.Close()

	res, err := chatRequest(context.Background(), newClient(srv.URL, demoUser, "mounted"), "mounted", demoPrompt, func(extension, string) {})
	require.NoError(t, err)
	assert.Contains(t, res.Content, strings.TrimSpace(scriptedapi.DemoContent))
	wsDir, err := executor.WorkspaceDir(data, demoUser, "mounted")
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(wsDir, scriptedapi.DemoFile), "the agent ran in a sandbox")

	plain := []byte(`{"model": "gpt-own",   "messages": [{"role": "user", "content": "hi"}], "x_vendor": {"keep": [1, 2]}}`)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(plain))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(body), "from the gateway")
	mu.Lock()
	require.Len(t, got, 1, "only the plain request reached the gateway's handler")
	assert.Equal(t, plain, got[0], "byte for byte")
	mu.Unlock()

	resp, err = http.Get(srv.URL + "/v1/models")
	require.NoError(t, err)
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	_ = resp.Body.Close()
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	assert.Subset(t, ids, []string{"coder", "qa", "gpt-own"})
}

// TestStackMiddlewareOneReading is issue 32's finding 1 through
// Stack.Middleware with the example's configuration: in front of a
// gateway handler that decodes with encoding/json and would serve any
// assistant of the directory (sandboxed ones included, from their
// connectors), a body that names the sandboxed "coder" to encoding/json but
// something else to another reader (a duplicate "model", a case variant,
// an escaped name, invalid UTF-8) or that is too large to read is refused
// in OpenAI's error shape. The handler never serves coder and no container
// starts.
func TestStackMiddlewareOneReading(t *testing.T) {
	g, data := startGateway(t)
	var mu sync.Mutex
	var served []string
	naive := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		served = append(served, req.Model)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"served":"`+req.Model+`"}`)
	})
	srv := httptest.NewServer(g.stack.Middleware(naive))
	defer srv.Close()

	const msgs = `"messages":[{"role":"user","content":"write hello.txt"}]`
	for name, body := range map[string]string{
		"duplicate model":  `{"model":"nonexistent","model":"coder",` + msgs + `}`,
		"case variant":     `{"model":"nonexistent","Model":"coder",` + msgs + `}`,
		"escaped name":     `{"model":"nonexistent","mod\u0065l":"coder",` + msgs + `}`,
		"invalid utf-8":    "{\"model\":\"qa\",\"Model\":\"coder\xff\"," + msgs + `}`,
		"trailing object":  `{"model":"qa",` + msgs + `}{"model":"coder"}`,
		"over the cap":     `{"model":"qa","Model":"coder",` + msgs + `,"pad":"` + strings.Repeat("x", 9<<20) + `"}`,
		"sandbox garbage":  `{"model":"coder"} garbage`,
		"loose model name": `{"model":"Coder",` + msgs + `}`,
	} {
		path := "/v1/chat/completions"
		if strings.HasPrefix(name, "sandbox") {
			path = "/v1/sandboxes"
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(openai.HeaderUser, demoUser)
		req.Header.Set("X-Agentbox-Chat", "one-reading")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, resp.StatusCode, "%s: %s", name, got)
		var e struct {
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(got, &e), "%s: %s", name, got)
		assert.Equal(t, "invalid_request_error", e.Error.Type, "%s: %s", name, got)
	}
	mu.Lock()
	assert.Empty(t, served, "the gateway's own handler served nothing")
	mu.Unlock()
	assert.Empty(t, managedContainers(t, data), "no sandbox started")
	assert.Empty(t, g.stack.Orchestrator.Sandboxes(demoUser), "no client sandbox was created")
}
