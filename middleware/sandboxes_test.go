package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

// TestClientSandboxBadInput: every bad create and request says what to
// fix, and another user's sandbox is "not found".
func TestClientSandboxBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tests := map[string]struct {
		user string
		c    middleware.SandboxCreate
		kind middleware.Kind
		want string
	}{
		"bad user":        {user: "../x", c: middleware.SandboxCreate{Assistant: "coder"}, kind: middleware.KindBadRequest, want: "valid user id"},
		"bad id":          {user: "alice", c: middleware.SandboxCreate{ID: "a/b", Assistant: "coder"}, kind: middleware.KindBadRequest, want: "only [A-Za-z0-9_.-]"},
		"unknown model":   {user: "alice", c: middleware.SandboxCreate{Assistant: "nope"}, kind: middleware.KindNotFound, want: "does not exist"},
		"plain assistant": {user: "alice", c: middleware.SandboxCreate{Assistant: "qa"}, kind: middleware.KindBadRequest, want: "has no sandbox"},
		"ttl too long":    {user: "alice", c: middleware.SandboxCreate{Assistant: "coder", TTL: 48 * time.Hour}, kind: middleware.KindBadRequest, want: "out of range"},
		"bad tag key":     {user: "alice", c: middleware.SandboxCreate{Assistant: "coder", Tags: map[string]string{"a b": "x"}}, kind: middleware.KindBadRequest, want: "tag key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := e.o.CreateSandbox(ctx, tc.user, tc.c)
			require.Error(t, err)
			assert.ErrorIs(t, err, &middleware.Error{Kind: tc.kind})
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	sb, err := e.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{Assistant: "coder", Tags: map[string]string{"thread": "t1"}})
	require.NoError(t, err)
	assert.Regexp(t, `^sb_[0-9a-f]{16}$`, sb.ID, "a generated id")
	assert.Equal(t, middleware.DefaultSandboxTTL, sb.TTL)
	assert.Equal(t, middleware.SandboxIdle, sb.State)
	_, err = e.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: sb.ID, Assistant: "coder"})
	assert.ErrorIs(t, err, &middleware.Error{Kind: middleware.KindBusy}, "the id exists")
	_, err = e.o.CreateSandbox(ctx, "bob", middleware.SandboxCreate{ID: sb.ID, Assistant: "coder"})
	require.NoError(t, err, "ids are per user")

	for _, call := range map[string]func() error{
		"get":       func() error { _, err := e.o.Sandbox("bob2", sb.ID); return err },
		"heartbeat": func() error { _, err := e.o.HeartbeatSandbox("bob2", sb.ID); return err },
		"delete":    func() error { return e.o.DeleteSandbox(ctx, "bob2", sb.ID) },
		"request": func() error {
			req := request("1")
			req.UserID, req.SandboxID = "bob2", sb.ID
			_, err := e.h.Handle(ctx, req, nil)
			return err
		},
	} {
		err := call()
		assert.ErrorIs(t, err, &middleware.Error{Kind: middleware.KindNotFound})
	}
	assert.Empty(t, e.o.Sandboxes("bob2"))

	req := request("_sbx." + sb.ID)
	_, err = e.h.Handle(ctx, req, nil)
	assert.ErrorIs(t, err, &middleware.Error{Kind: middleware.KindBadRequest}, "the sandbox's workspace key is reserved")
	assert.Empty(t, e.ex.Sandboxes(), "no sandbox for refused requests")

	for i := len(e.o.Sandboxes("alice")); i < middleware.MaxSandboxesPerUser; i++ {
		_, err := e.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: fmt.Sprintf("s%d", i), Assistant: "coder"})
		require.NoError(t, err)
	}
	_, err = e.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{Assistant: "coder"})
	assert.ErrorIs(t, err, &middleware.Error{Kind: middleware.KindOverloaded}, "the per-user cap")
}

// TestClientSandboxRun: a request in a client sandbox runs on the
// sandbox's workspace key (not the chat's), emits connected, file_written
// and exec events with the exit codes the CLI reported, and counts as a
// heartbeat; a sandbox without heartbeat stops; a stopped sandbox is
// started again by a request.
func TestClientSandboxRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, err := e.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "dev", Assistant: "coder", TTL: time.Second})
	require.NoError(t, err)
	input := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	e.setScript(scripted.Script{Lines: []scripted.Line{
		{Event: &executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "t1", Name: "Write", Input: input(map[string]string{"file_path": "/workspace/a.txt"})}}},
		{Event: &executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "t1", Content: "ok"}}},
		{Event: &executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "t2", Name: "Bash", Input: input(map[string]string{"command": "make test"})}}},
		{Event: &executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "t2", Content: "Exit code 3\nFAIL", IsError: true}}},
		{Event: &executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "t3", Name: "Bash", Input: input(map[string]string{"command": "ls"})}}},
		{Event: &executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "t3", Content: "a.txt"}}},
		{Event: &executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "t4", Name: "Edit", Input: input(map[string]string{"file_path": "b.txt"})}}},
		{Event: &executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "t4", Content: "no such file", IsError: true}}},
		{Result: &executor.Completion{Content: "done", FinishReason: executor.FinishStop}},
	}})
	req := request("c1")
	req.SandboxID = sb.ID
	var c collector
	_, err = e.h.Handle(ctx, req, c.emit)
	require.NoError(t, err)
	var got []string
	for _, ev := range c.get() {
		if ev.Kind == executor.EventSandbox && ev.Sandbox != nil {
			s := ev.Text + " " + ev.Sandbox.ID + ev.Sandbox.Path + ev.Sandbox.Command
			if ev.Sandbox.ExitCode != nil {
				s += fmt.Sprintf(" exit %d", *ev.Sandbox.ExitCode)
			}
			got = append(got, s)
		}
	}
	assert.Equal(t, []string{"connected dev", "file_written /workspace/a.txt", "exec make test exit 3", "exec ls exit 0"}, got,
		"a failed write is no file_written")
	sbs := e.ex.Sandboxes()
	require.Len(t, sbs, 1)
	assert.Equal(t, "_sbx.dev", sbs[0].Spec().ChatID, "the sandbox's workspace, not the chat's")
	assert.Positive(t, sbs[0].Spec().IdleTTL, "kept between requests like a session")

	require.Eventually(t, func() bool {
		s, err := e.o.Sandbox("alice", "dev")
		return err == nil && s.State == middleware.SandboxStopped
	}, 10*time.Second, 20*time.Millisecond, "no heartbeat within the ttl stops it")
	_, err = e.h.Handle(ctx, req, nil)
	require.NoError(t, err, "a request starts a stopped sandbox again")
	s, err := e.o.Sandbox("alice", "dev")
	require.NoError(t, err)
	assert.NotEqual(t, middleware.SandboxStopped, s.State)

	req.AssistantID = "qa"
	_, err = e.h.Handle(ctx, req, nil)
	require.Error(t, err, "qa is not sandboxed: the request passes through, and the next handler does not know qa")

	require.NoError(t, e.o.DeleteSandbox(ctx, "alice", "dev"))
	req.AssistantID = "coder"
	_, err = e.h.Handle(ctx, req, nil)
	assert.ErrorIs(t, err, &middleware.Error{Kind: middleware.KindNotFound})
}

// TestClientSandboxPrewarmHoldsTheTTL: a prewarm that takes longer than
// the sandbox's TTL (a container start on a loaded machine) does not stop
// the sandbox under its creator: the TTL counts from when it is handed
// back, and only then runs out without a heartbeat.
func TestClientSandboxPrewarmHoldsTheTTL(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	e := newEnv(t, withOptions(func(o *middleware.Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	}))
	defer func() { t.Log(logs.String()) }()
	onCreate := e.ex.OnCreate
	e.ex.OnCreate = func(sb *executortest.FakeSandbox) {
		time.Sleep(1500 * time.Millisecond)
		onCreate(sb)
	}
	ctx := context.Background()
	sb, err := e.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "slow", Assistant: "coder", TTL: time.Second, Prewarm: true})
	require.NoError(t, err)
	// The fake backend keeps no containers, so the sandbox is idle, not
	// warm; what matters is that its TTL did not pass during the start.
	assert.Equal(t, middleware.SandboxIdle, sb.State, "handed back live, though its start took longer than its TTL")
	assert.WithinDuration(t, time.Now().Add(time.Second), sb.Expires, 500*time.Millisecond, "the TTL counts from the hand-back")
	require.Eventually(t, func() bool {
		s, err := e.o.Sandbox("alice", "slow")
		return err == nil && s.State == middleware.SandboxStopped
	}, 10*time.Second, 20*time.Millisecond, "then no heartbeat within the ttl stops it")
}

// TestClientSandboxesSurviveARestart: with Options.SandboxDir, a new
// Orchestrator on the same directory knows the sandboxes (tags, TTL,
// owner); one whose TTL passed meanwhile comes back stopped; delete
// removes the record; bad files are skipped, never trusted.
func TestClientSandboxesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	withDir := withOptions(func(o *middleware.Options) { o.SandboxDir = dir })
	ctx := context.Background()
	first := newEnv(t, withDir)
	_, err := first.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "long", Assistant: "coder", TTL: time.Hour, Tags: map[string]string{"thread": "t1"}})
	require.NoError(t, err)
	_, err = first.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "short", Assistant: "coder", TTL: time.Second})
	require.NoError(t, err)
	_, err = first.o.CreateSandbox(ctx, "bob", middleware.SandboxCreate{ID: "gone", Assistant: "coder"})
	require.NoError(t, err)
	require.NoError(t, first.o.DeleteSandbox(ctx, "bob", "gone"))
	assert.NoFileExists(t, filepath.Join(dir, "bob.json"), "a user without sandboxes has no file")
	require.NoError(t, first.o.Close())
	info, err := os.Stat(filepath.Join(dir, "alice.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "mallory.json"), []byte(`[{"id": "../x", "assistant": "coder", "ttl_ns": 1}]`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "eve.json"), []byte("not json"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "-bad user.json"), []byte("[]"), 0o600))
	time.Sleep(1100 * time.Millisecond) // short's TTL passes while no gateway runs

	second := newEnv(t, withDir)
	list := second.o.Sandboxes("alice")
	require.Len(t, list, 2)
	byID := map[string]middleware.ClientSandbox{}
	for _, s := range list {
		byID[s.ID] = s
	}
	assert.Equal(t, map[string]string{"thread": "t1"}, byID["long"].Tags)
	assert.Equal(t, time.Hour, byID["long"].TTL)
	assert.Equal(t, middleware.SandboxIdle, byID["long"].State, "its kept container did not survive; the next request starts one")
	assert.Equal(t, middleware.SandboxStopped, byID["short"].State, "its TTL passed meanwhile")
	assert.Empty(t, second.o.Sandboxes("bob"))
	assert.Empty(t, second.o.Sandboxes("mallory"), "an invalid record is skipped")
	assert.Empty(t, second.o.Sandboxes("eve"))
	_, err = second.o.Sandbox("bob", "long")
	assert.ErrorIs(t, err, &middleware.Error{Kind: middleware.KindNotFound}, "still per user")

	second.setScript(scripted.Text(executor.Usage{}, "ok"))
	req := request("c1")
	req.SandboxID = "long"
	_, err = second.h.Handle(ctx, req, nil)
	require.NoError(t, err, "a request runs in a sandbox the restart kept")
	require.NoError(t, second.o.DeleteSandbox(ctx, "alice", "long"))
	require.NoError(t, second.o.DeleteSandbox(ctx, "alice", "short"))
	assert.NoFileExists(t, filepath.Join(dir, "alice.json"))
}
