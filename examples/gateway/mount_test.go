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
	"github.com/agentbox/agentbox/internal/scriptedapi"
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
