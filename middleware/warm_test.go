package middleware

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

func TestWarmKeyChangesWithEveryEffectiveOption(t *testing.T) {
	base := func() *Assistant {
		return &Assistant{ID: "coder", Sandbox: &Sandbox{Runner: "claude",
			Spec:      executor.Spec{Image: "img", Timeout: time.Minute, IdleTTL: time.Minute},
			Run:       executor.RunRequest{SystemPrompt: "be brief", Model: "m", Arguments: map[string]any{"max_turns": 3}, AllowedTools: []string{"Read"}},
			HomeFiles: map[string][]byte{".claude/skills/a/SKILL.md": []byte("a")},
			Connector: Connector{Upstream: "http://up", Key: "k"}}}
	}
	ref := warmKey(base())
	same := base()
	same.Sandbox.Spec.UserID, same.Sandbox.Spec.ChatID = "alice", "1"
	same.Sandbox.Run.Messages = []executor.Message{{Role: "user", Content: "hi"}}
	assert.Equal(t, ref, warmKey(same), "per-request fields do not change the key")
	for name, change := range map[string]func(a *Assistant){
		"image":         func(a *Assistant) { a.Sandbox.Spec.Image = "img2" },
		"memory":        func(a *Assistant) { a.Sandbox.Spec.MemoryBytes = 1 << 30 },
		"system prompt": func(a *Assistant) { a.Sandbox.Run.SystemPrompt = "be long" },
		"model":         func(a *Assistant) { a.Sandbox.Run.Model = "m2" },
		"arguments":     func(a *Assistant) { a.Sandbox.Run.Arguments = map[string]any{"max_turns": 4} },
		"tools":         func(a *Assistant) { a.Sandbox.Run.AllowedTools = []string{"Read", "Write"} },
		"mcp":           func(a *Assistant) { a.Sandbox.Run.MCPConfig = []byte(`{}`) },
		"skills":        func(a *Assistant) { a.Sandbox.HomeFiles = nil },
		"connector key": func(a *Assistant) { a.Sandbox.Connector.Key = "k2" },
		"upstream":      func(a *Assistant) { a.Sandbox.Connector.Upstream = "http://other" },
		"assistant id":  func(a *Assistant) { a.ID = "coder2" },
	} {
		a := base()
		change(a)
		assert.NotEqual(t, ref, warmKey(a), name)
	}
	assert.NotContains(t, ref, "k", "the key is a hash")
}

func TestSessionSpecOutlivesSeveralTurns(t *testing.T) {
	s := sessionSpec(executor.Spec{Timeout: 10 * time.Minute, IdleTTL: 10 * time.Minute})
	assert.Equal(t, SessionLife, s.Timeout)
	s = sessionSpec(executor.Spec{Timeout: 3 * time.Hour, IdleTTL: time.Hour})
	assert.Equal(t, 4*time.Hour, s.Timeout)
	s = sessionSpec(executor.Spec{Timeout: time.Minute})
	assert.Equal(t, time.Minute, s.Timeout, "the request policy keeps its timeout")
}

func TestAdmissionIdleContainersHoldMemoryNotSlots(t *testing.T) {
	q := newAdmission(Admission{MaxRuns: 1, MaxRunsPerUser: 1, MaxMemoryBytes: 3 << 30})
	var reclaimed atomic.Int32
	q.reclaim = func() bool {
		reclaimed.Add(1)
		q.idle(-2 << 30) // the pool removes one idle container
		return true
	}
	q.idle(2 << 30)
	free, err := q.acquire(context.Background(), "u", 1<<30, far, noReport)
	require.NoError(t, err, "an idle container takes no run slot: one run still starts beside it")
	assert.Equal(t, int32(0), reclaimed.Load(), "and fits in memory beside it")
	free()

	// A run that fits only without the idle container's memory waits, and
	// the idle container is removed for it.
	free, err = q.acquire(context.Background(), "u", 1<<30, far, noReport)
	require.NoError(t, err)
	w := queued(t, q, context.Background(), "v", far)
	free()
	o := <-w
	require.NoError(t, o.err)
	assert.Equal(t, int32(1), reclaimed.Load(), "the idle container made room")
	o.free()
}
