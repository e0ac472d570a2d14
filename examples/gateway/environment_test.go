package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// TestEnvironmentSnapshot: the sandbox's environment, captured by running
// a script in the real image, reaches the model as part of the system
// prompt (what the scripted server received) and is in GET
// /v1/models/coder; the CLI version in both is the one in the image.
func TestEnvironmentSnapshot(t *testing.T) {
	g, _ := startGateway(t)
	ctx := context.Background()
	_, err := demoRequest(ctx, g.URL, "environment", demoPrompt, func(extension, string) {})
	require.NoError(t, err)

	resp, err := http.Get(g.URL + "/v1/models/" + demoAssistant)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var m struct {
		ID          string                `json:"id"`
		Environment *executor.Environment `json:"environment"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	require.NotNil(t, m.Environment, "GET /v1/models/coder carries the snapshot")
	env := m.Environment
	assert.Equal(t, "agentbox/sandbox-claude:latest", env.Image)
	assert.True(t, strings.HasPrefix(env.ImageID, "sha256:"), env.ImageID)
	assert.Contains(t, env.Mode, "Docker container")
	require.NotEmpty(t, env.Tools["claude"], "the image's CLI")
	assert.Contains(t, env.Tools["claude"], "Claude Code")

	reqs := g.Model.Requests()
	require.NotEmpty(t, reqs)
	system := reqs[0].Body.System.Text()
	assert.Contains(t, system, env.Summary(), "the summary is in the model's system prompt")
	assert.Contains(t, system, "claude ("+env.Tools["claude"]+")")

	resp2, err := http.Get(g.URL + "/v1/models")
	require.NoError(t, err)
	defer func() { _ = resp2.Body.Close() }()
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp2.Body).Decode(&list))
	for _, raw := range list.Data {
		assert.NotContains(t, string(raw), `"environment"`, "the list stays small")
	}
}
