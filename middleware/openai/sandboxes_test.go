package openai_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/middleware"
)

// TestNoSandboxAPI: without Options.Sandboxes the API is not there and a
// chat completion that names a sandbox is refused, not run elsewhere.
func TestNoSandboxAPI(t *testing.T) {
	srv := serve(t, scriptedHandler(nil, &middleware.Response{Content: "ok"}, nil))
	resp, err := srv.Client().Get(srv.URL + "/v1/sandboxes")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	body := `{"model": "coder", "messages": [{"role": "user", "content": "hi"}]}`
	r := post(t, srv, body, "X-Agentbox-User", "u", "X-Agentbox-Chat", "c", "X-Agentbox-Sandbox", "dev1")
	assert.Equal(t, http.StatusBadRequest, r.StatusCode)
	assert.Contains(t, string(r.Body), "no client sandboxes")
	r = post(t, srv, `{"model": "coder", "sandbox": "../x", "messages": [{"role": "user", "content": "hi"}]}`, "X-Agentbox-User", "u", "X-Agentbox-Chat", "c")
	assert.Equal(t, http.StatusBadRequest, r.StatusCode)
	r = post(t, srv, body, "X-Agentbox-User", "u", "X-Agentbox-Chat", "c")
	assert.Equal(t, http.StatusOK, r.StatusCode, "without a sandbox the request runs: %s", r.Body)
}
