package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

func TestNodeSDK(t *testing.T) {
	dir := testenv.NodePackage(t, "openai", filepath.Join("testdata", "node"), filepath.Join("testdata", "node", "client.mjs"))
	st := newStack(t)
	script, want := agentRun()
	st.setScript("1", script)
	st.setScript("2", script)
	st.setScript("3", scripted.Script{Exit: 1})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BASE_URL="+st.srv.URL+"/v1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "node client.mjs: %s", stderr.String())

	type failure struct {
		IsAPIError bool    `json:"isAPIError"`
		Status     int     `json:"status"`
		Code       string  `json:"code"`
		Type       string  `json:"type"`
		Param      *string `json:"param"`
		Message    string  `json:"message"`
	}
	var got struct {
		Content, Finish, Streamed, StreamFinish string
		Usage, StreamUsage                      map[string]any
		UsageInLastChunk                        bool
		Chunks                                  int
		Kinds                                   map[string]int
		NotFound, MissingChat                   failure
		AgentFailed, AgentFailedStreamed        failure
	}
	require.NoError(t, json.Unmarshal(stdout, &got), "%s", stdout)

	assert.Equal(t, want, got.Content)
	assert.Equal(t, got.Content, got.Streamed, "streamed text == non-streamed content of the same run")
	assert.Equal(t, "stop", got.Finish)
	assert.Equal(t, "stop", got.StreamFinish)
	assert.True(t, got.UsageInLastChunk, "usage arrives in the final chunk")
	assert.Equal(t, got.Usage, got.StreamUsage)
	assert.Equal(t, 6120.0, got.Usage["prompt_tokens"])
	assert.Equal(t, 40.0, got.Usage["completion_tokens"])
	assert.Greater(t, got.Chunks, 6)
	assert.Equal(t, map[string]int{"sandbox": 1, "init": 1, "thinking": 1, "tool_use": 1, "tool_result": 1, "done": 1}, got.Kinds,
		"the extension reaches JS users on the chunk")

	assert.True(t, got.NotFound.IsAPIError)
	assert.Equal(t, 404, got.NotFound.Status)
	assert.Equal(t, "model_not_found", got.NotFound.Code)
	require.NotNil(t, got.NotFound.Param)
	assert.Equal(t, "model", *got.NotFound.Param)

	assert.True(t, got.MissingChat.IsAPIError)
	assert.Equal(t, 400, got.MissingChat.Status)
	assert.Equal(t, "invalid_request_error", got.MissingChat.Type)
	assert.Contains(t, got.MissingChat.Message, "valid chat id")

	assert.True(t, got.AgentFailed.IsAPIError)
	assert.Equal(t, 502, got.AgentFailed.Status)
	assert.Equal(t, "agent_failed", got.AgentFailed.Code)

	assert.True(t, got.AgentFailedStreamed.IsAPIError, "a mid-stream error event is raised as an APIError")
	assert.Equal(t, "agent_failed", got.AgentFailedStreamed.Code)
	assert.Contains(t, got.AgentFailedStreamed.Message, "exit code 1")

	chat3 := 0
	for _, sb := range st.ex.Sandboxes() {
		if sb.Spec().ChatID == "3" {
			chat3++
		}
	}
	assert.Equal(t, 2, chat3, "the SDK did not re-run the failed agent (x-should-retry: false)")
}
