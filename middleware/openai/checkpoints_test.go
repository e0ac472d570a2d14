package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// checkpointCalls is a CheckpointManager that records what the adapter
// asked of it and answers with one checkpoint.
type checkpointCalls struct{ calls []string }

var _ middleware.CheckpointManager = (*checkpointCalls)(nil)

var oneCheckpoint = middleware.Checkpoint{CheckpointInfo: executor.CheckpointInfo{ID: "ck_1", Label: "2:ab", Created: time.Unix(1700000000, 0), Files: 3, Changed: 1}, Turn: 1, Answered: true}

func (m *checkpointCalls) Checkpoints(_ context.Context, user, chat, sandbox string) (middleware.CheckpointList, error) {
	m.calls = append(m.calls, fmt.Sprintf("list %s %s %s", user, chat, sandbox))
	return middleware.CheckpointList{Checkpoints: []middleware.Checkpoint{oneCheckpoint}, Head: "ck_1"}, nil
}

func (m *checkpointCalls) RestoreCheckpoint(_ context.Context, user, chat, sandbox, id string) (executor.RestoreInfo, error) {
	m.calls = append(m.calls, fmt.Sprintf("restore %s %s %s %s", user, chat, sandbox, id))
	if id == "ck_gone" {
		return executor.RestoreInfo{}, &middleware.Error{Kind: middleware.KindNotFound, Param: "checkpoint", Message: "there is no checkpoint"}
	}
	return executor.RestoreInfo{Written: 2, Removed: 1}, nil
}

func (m *checkpointCalls) ForkChat(_ context.Context, user, from, id, to string) (executor.CheckpointInfo, error) {
	m.calls = append(m.calls, fmt.Sprintf("forkchat %s %s %s %s", user, from, id, to))
	return oneCheckpoint.CheckpointInfo, nil
}

func (m *checkpointCalls) ForkSandbox(_ context.Context, user, from, id string, count int, c middleware.SandboxCreate) ([]middleware.ClientSandbox, error) {
	m.calls = append(m.calls, fmt.Sprintf("forksandbox %s %s %s %d %s %v %v %v", user, from, id, count, c.ID, c.TTL, c.Tags, c.Prewarm))
	return []middleware.ClientSandbox{{ID: "f1", Assistant: "coder"}}, nil
}

// TestCheckpointAPI is the checkpoint API's HTTP layer: what each route
// asks of the manager, and the bad requests it refuses before asking
// anything, each with a 4xx in OpenAI's error shape that says what to fix.
func TestCheckpointAPI(t *testing.T) {
	st := newStack(t)
	cat, err := middleware.NewCatalog(&middleware.Assistant{ID: "qa"})
	require.NoError(t, err)
	m := &checkpointCalls{}
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, st.o.Wrap), Catalog: cat,
		Sandboxes: st.o, Checkpoints: m})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	do := func(method, path, body string, headers ...string) *reply {
		t.Helper()
		return sendTo(t, srv, method, path, body, headers...)
	}
	alice := []string{"X-Agentbox-User", "alice"}

	good := map[string]struct {
		method, path, body string
		status             int
		call, answer       string
	}{
		"list a chat's":       {"GET", "/v1/chats/c1/checkpoints", "", 200, "list alice c1 ", `"turn":1`},
		"list a sandbox's":    {"GET", "/v1/sandboxes/sb/checkpoints", "", 200, "list alice  sb", `"current":true`},
		"restore in a chat":   {"POST", "/v1/chats/c1/checkpoints/ck_1/restore", "", 200, "restore alice c1  ck_1", `"files_written":2`},
		"restore with {}":     {"POST", "/v1/sandboxes/sb/checkpoints/ck_1/restore", "{}", 200, "restore alice  sb ck_1", `checkpoint.restored`},
		"restore of one gone": {"POST", "/v1/chats/c1/checkpoints/ck_gone/restore", "", 404, "restore alice c1  ck_gone", `there is no checkpoint`},
		"fork a chat":         {"POST", "/v1/chats/c1/fork", `{"chat":"c2","checkpoint":"ck_1"}`, 201, "forkchat alice c1 ck_1 c2", `"chat":"c2"`},
		"fork a sandbox":      {"POST", "/v1/sandboxes/sb/fork", `{"checkpoint":"ck_1","count":3,"id":"x","ttl_seconds":60,"tags":{"k":"v"},"prewarm":true}`, 201, "forksandbox alice sb ck_1 3 x 1m0s map[k:v] true", `"id":"f1"`},
		"fork the newest":     {"POST", "/v1/sandboxes/sb/fork", "", 201, "forksandbox alice sb  1  0s map[] false", `"id":"f1"`},
	}
	for name, tc := range good {
		t.Run(name, func(t *testing.T) {
			m.calls = nil
			r := do(tc.method, tc.path, tc.body, alice...)
			assert.Equal(t, tc.status, r.StatusCode, "%s", r.Body)
			assert.Equal(t, []string{tc.call}, m.calls)
			assert.Contains(t, string(r.Body), tc.answer)
		})
	}

	gone := do("POST", "/v1/chats/c1/checkpoints/ck_gone/restore", "", alice...)
	assert.Contains(t, string(gone.Body), `"code":"checkpoint_not_found"`, "not a model's code")

	bad := map[string]struct {
		method, path, body string
		headers            []string
		status             int
		says               string
	}{
		"no user":                {"GET", "/v1/chats/c1/checkpoints", "", nil, 400, "needs the user id"},
		"a user twice":           {"GET", "/v1/chats/c1/checkpoints", "", []string{"X-Agentbox-User", "alice", "X-Agentbox-User", "bob"}, 400, "X-Agentbox-User"},
		"a bad user":             {"GET", "/v1/chats/c1/checkpoints", "", []string{"X-Agentbox-User", "../x"}, 400, "X-Agentbox-User"},
		"list by POST":           {"POST", "/v1/chats/c1/checkpoints", "", alice, 405, "GET"},
		"restore by GET":         {"GET", "/v1/chats/c1/checkpoints/ck_1/restore", "", alice, 405, "POST"},
		"fork by GET":            {"GET", "/v1/chats/c1/fork", "", alice, 405, "POST"},
		"restore with a body":    {"POST", "/v1/chats/c1/checkpoints/ck_1/restore", `{"files":["a"]}`, alice, 400, "send no body, or {}"},
		"restore, trailing data": {"POST", "/v1/chats/c1/checkpoints/ck_1/restore", `{} x`, alice, 400, "after"},
		"fork without a chat":    {"POST", "/v1/chats/c1/fork", `{"checkpoint":"ck_1"}`, alice, 400, "name the new chat"},
		"fork, unknown member":   {"POST", "/v1/chats/c1/fork", `{"chat":"c2","model":"qa"}`, alice, 400, `a member model that this request does not take`},
		"fork, a member twice":   {"POST", "/v1/chats/c1/fork", `{"chat":"c2","chat":"c3"}`, alice, 400, "chat"},
		"fork, a look-alike":     {"POST", "/v1/sandboxes/sb/fork", `{"Checkpoint":"ck_1"}`, alice, 400, "checkpoint"},
		"fork, ttl out of range": {"POST", "/v1/sandboxes/sb/fork", `{"ttl_seconds":-1}`, alice, 400, "ttl_seconds"},
		"fork, count a string":   {"POST", "/v1/sandboxes/sb/fork", `{"count":"2"}`, alice, 400, "count"},
		"fork, compressed":       {"POST", "/v1/sandboxes/sb/fork", `{}`, append([]string{"Content-Encoding", "gzip"}, alice...), 400, "uncompressed"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			m.calls = nil
			r := do(tc.method, tc.path, tc.body, tc.headers...)
			assert.Equal(t, tc.status, r.StatusCode, "%s", r.Body)
			assert.Contains(t, string(r.Body), tc.says)
			assert.Contains(t, string(r.Body), `"error"`, "OpenAI's error shape")
			assert.Empty(t, m.calls, "refused before the manager is asked")
		})
	}
}

// TestCheckpointAPIOff: without Options.Checkpoints the routes are no
// routes (404, or the gateway's own handler's), and with a backend that
// keeps no checkpoints the Orchestrator says so.
func TestCheckpointAPIOff(t *testing.T) {
	st := newStack(t)
	r := postTo(t, st.srv, "/v1/chats/c1/fork", `{"chat":"c2"}`, "X-Agentbox-User", "alice")
	assert.Equal(t, http.StatusNotFound, r.StatusCode, "%s", r.Body)

	_, err := st.o.Checkpoints(context.Background(), "alice", "c1", "")
	var e *middleware.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, middleware.KindBadRequest, e.Kind)
	assert.Contains(t, e.Message, "keeps no workspace checkpoints")
}
