package middleware_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/middleware/openai"
)

// recordingRunner is the claude runner that keeps every argv it built.
type recordingRunner struct {
	*claude.Runner
	mu   sync.Mutex
	argv [][]string
	// warmUp, when set, is the line a pre-started CLI gets instead of
	// its warm-up (the runner's own end judges what the CLI writes).
	warmUp atomic.Pointer[string]
}

// WarmUp is the runner's warm-up, or the line a test set.
func (r *recordingRunner) WarmUp() ([]byte, func([]byte) (bool, error)) {
	line, end := r.Runner.WarmUp()
	if w := r.warmUp.Load(); w != nil {
		line = []byte(*w)
	}
	return line, end
}

func (r *recordingRunner) Invocation(req executor.RunRequest) (executor.Invocation, error) {
	inv, err := r.Runner.Invocation(req)
	r.mu.Lock()
	r.argv = append(r.argv, inv.Args)
	r.mu.Unlock()
	return inv, err
}

// count returns how many invocations were built so far.
func (r *recordingRunner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.argv)
}

// nth returns the argv of the i-th invocation.
func (r *recordingRunner) nth(i int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.argv[i]
}

// last returns the argv of the latest run.
func (r *recordingRunner) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.argv[len(r.argv)-1]
}

// sessionE2E is the real stack (OpenAI adapter, Orchestrator with a
// SessionDir, executor/docker, the real CLI) against a scripted model
// that runs a Bash command when asked and answers with what it printed.
type sessionE2E struct {
	api     *scriptedapi.Server
	dataDir string
	runner  *recordingRunner
	client  sdk.Client
	o       *middleware.Orchestrator
}

// sessionMarkerCmd prints a text the model cannot know without running it.
const (
	sessionMarkerCmd = "echo marker-$((6*7))"
	sessionMarker    = "marker-42"
)

func newSessionE2E(t *testing.T, args map[string]any) *sessionE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	env := &sessionE2E{dataDir: t.TempDir(), runner: &recordingRunner{Runner: claude.New()}}
	env.api = scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
		if res := r.NewToolResults(); len(res) > 0 {
			return scriptedapi.Say("The command printed " + strings.TrimSpace(res[len(res)-1].Result) + ".")
		}
		last := r.LastUserText()
		if strings.Contains(last, "run the command") && !strings.Contains(last, "</conversation_history>") {
			return scriptedapi.Call("Bash", map[string]string{"command": sessionMarkerCmd, "description": "Print the marker"})
		}
		return scriptedapi.Say("Answered without tools.")
	}))
	t.Cleanup(env.api.Close)
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "claude",
		// No stall watchdog and a generous timeout: on a machine shared
		// with other test runs the CLI's start alone has taken over a
		// minute (load average 84 on 2 cores).
		Spec: executor.Spec{Image: img, Timeout: 5 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 30 * time.Second},
		Run:       executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: args},
		Connector: middleware.Connector{Upstream: env.api.URL, Key: connectorKey},
	}}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog: cat,
		NewExecutor: func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			return docker.New(ctx, docker.Options{DataDir: env.dataDir, Image: img, HelperBinary: bin, Logger: log,
				ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
		},
		Runners: []executor.Runner{env.runner},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(modelroute.Options{}), nil
		},
		SessionDir:      filepath.Join(env.dataDir, "sessions"),
		TeardownTimeout: 30 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, o.Close()) })
	env.o = o
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, o.Wrap), Catalog: cat})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	env.client = sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return env
}

// ask sends msgs (alternating user/assistant, starting with the user) and
// returns the answer and the model requests the turn caused.
func (env *sessionE2E) ask(t *testing.T, user string, msgs ...string) (string, []*scriptedapi.Request) {
	t.Helper()
	before := len(env.api.MessageRequests())
	p := sdk.ChatCompletionNewParams{Model: "coder", User: sdk.String(user)}
	for i, m := range msgs {
		if i%2 == 0 {
			p.Messages = append(p.Messages, sdk.UserMessage(m))
		} else {
			p.Messages = append(p.Messages, sdk.AssistantMessage(m))
		}
	}
	comp, err := env.client.Chat.Completions.New(context.Background(), p)
	require.NoError(t, err)
	// The transcript is saved after the response, before the chat's lease
	// is released.
	require.NoError(t, env.o.Settle(context.Background()))
	reqs := env.api.MessageRequests()[before:]
	// Only the agent loop's requests offer tools; the CLI's side queries
	// (if any) do not.
	reqs = slices.DeleteFunc(reqs, func(r *scriptedapi.Request) bool { return len(r.Body.Tools) == 0 })
	require.NotEmpty(t, reqs, "the turn reached the model")
	return comp.Choices[0].Message.Content, reqs
}

// toolBlocks returns the Bash tool_use ids and the texts of the
// tool_results a request carries.
func toolBlocks(r *scriptedapi.Request) (uses, results []string) {
	for _, m := range r.Body.Messages {
		for _, b := range m.Content {
			switch {
			case b.Type == "tool_use" && b.Name == "Bash":
				uses = append(uses, b.ID)
			case b.Type == "tool_result":
				results = append(results, b.Content.Text())
			}
		}
	}
	return uses, results
}

// rawMessages returns a request's messages as the bytes it sent.
func rawMessages(t *testing.T, r *scriptedapi.Request) []json.RawMessage {
	t.Helper()
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(r.Raw, &body))
	return body.Messages
}

// withoutCacheControl is msg with every "cache_control":{...} member
// removed, bytes otherwise untouched.
func withoutCacheControl(msg json.RawMessage) string {
	s := string(msg)
	for {
		i := strings.Index(s, `,"cache_control":{`)
		if i < 0 {
			return s
		}
		j := strings.Index(s[i+1:], "}")
		s = s[:i] + s[i+1+j+1:]
	}
}

func flag(argv []string, name string) (string, bool) {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1], true
		}
	}
	return "", false
}

func TestE2ESessionResumesTheAgentsOwnWork(t *testing.T) {
	env := newSessionE2E(t, map[string]any{"permission_mode": "acceptEdits", "max_turns": 10})
	const u1 = "Please run the command, original wording."
	a1, t1 := env.ask(t, "alice:s1", u1)
	require.Contains(t, a1, sessionMarker, "turn 1 ran Bash and answered with its output")
	argv1 := env.runner.last()
	id, ok := flag(argv1, "--session-id")
	require.True(t, ok, "turn 1 starts a named session: %q", argv1)
	assert.NotContains(t, argv1, "--no-session-persistence")
	stored := filepath.Join(env.dataDir, "sessions", "alice", "chat-s1", "coder", "transcript.jsonl")
	tr, err := os.ReadFile(stored)
	require.NoError(t, err, "the transcript is kept on the host")
	assert.Contains(t, string(tr), sessionMarker, "the transcript holds the tool's output")

	// Turn 2: the history is exactly turn 1 plus a new message.
	a2, t2 := env.ask(t, "alice:s1", u1, a1, "Thanks. What did it print?")
	argv2 := env.runner.last()
	resumed, ok := flag(argv2, "--resume")
	require.True(t, ok, "turn 2 resumes the session: %q", argv2)
	assert.Equal(t, id, resumed)
	assert.Equal(t, "Answered without tools.", a2)
	uses, results := toolBlocks(t2[0])
	assert.Len(t, uses, 1, "turn 2's model request carries turn 1's Bash tool_use")
	require.Len(t, results, 1, "and its tool_result")
	assert.Contains(t, results[0], sessionMarker)
	assert.NotContains(t, t2[0].AllText(), "<conversation_history>", "no flattened history beside the session")
	assert.Equal(t, 1, strings.Count(t2[0].AllText(), u1), "turn 1's message appears once")

	// Prompt caching needs turn 2's request to start with the content of
	// turn 1's last request. The CLI moves its cache breakpoint
	// (cache_control) to the newest message, which is not part of the
	// cached prefix; everything else must be the same bytes.
	prev, next := rawMessages(t, t1[len(t1)-1]), rawMessages(t, t2[0])
	require.Greater(t, len(next), len(prev))
	moved := 0
	for i := range prev {
		if string(prev[i]) == string(next[i]) {
			continue
		}
		moved++
		assert.Equal(t, withoutCacheControl(prev[i]), withoutCacheControl(next[i]), "message %d differs beyond the cache breakpoint", i)
	}
	t.Logf("turn 2's request repeats turn 1's last request's %d messages; %d differ only by the moved cache_control", len(prev), moved)

	// Regenerating turn 2's answer (the client sends turn 2's message
	// again) forks the session after turn 1's answer: turn 1's tool call
	// and result are kept, the old turn 2 is not, and the stored session
	// is left as it was.
	beforeFork := len(env.api.MessageRequests())
	a2r, t2r := env.ask(t, "alice:s1", u1, a1, "Thanks. What did it print?")
	argvFork := env.runner.last()
	assert.Contains(t, argvFork, "--fork-session", "a regenerated answer forks: %q", argvFork)
	from, _ := flag(argvFork, "--resume")
	assert.Equal(t, id, from, "from the stored session")
	at, ok := flag(argvFork, "--resume-session-at")
	assert.True(t, ok, "at turn 1's answer")
	assert.Contains(t, string(tr), `"uuid":"`+at+`"`, "an entry of turn 1's transcript")
	forkID, _ := flag(argvFork, "--session-id")
	assert.NotEqual(t, id, forkID, "into a new session")
	uses, results = toolBlocks(t2r[0])
	assert.Len(t, uses, 1, "the fork's model request carries turn 1's Bash tool_use")
	require.Len(t, results, 1)
	assert.Contains(t, results[0], sessionMarker, "and its result")
	assert.Equal(t, 1, strings.Count(t2r[0].AllText(), "Thanks. What did it print?"), "turn 2's message once: the old turn 2 is cut")
	assert.Len(t, env.api.MessageRequests()[beforeFork:], len(t2r), "the fork replays nothing through the model")
	// The next turn continues the fork.
	env.ask(t, "alice:s1", u1, a1, "Thanks. What did it print?", a2r, "One more?")
	resumedFork, _ := flag(env.runner.last(), "--resume")
	assert.Equal(t, forkID, resumedFork, "the turn after a regenerated answer resumes the fork")

	// A regenerated answer (the client replaced turn 2's answer) does not
	// continue the session that holds the old one.
	_, t2b := env.ask(t, "alice:s1", u1, a1, "Thanks. What did it print?", "A regenerated answer.", "Go on.")
	argv2b := env.runner.last()
	regenID, _ := flag(argv2b, "--resume")
	assert.NotContains(t, []string{id, forkID}, regenID, "a regenerated answer starts a new session: %q", argv2b)
	assert.Equal(t, []string{"user", "assistant", "user", "assistant", "user"}, roles(t2b[0]), "its history replayed as real turns")
	assert.Contains(t, t2b[0].AllText(), "A regenerated answer.")
	assert.NotContains(t, t2b[0].AllText(), a2, "the session's own answer is not replayed")

	// An edited turn 1 never resumes the stale session.
	const edited = "Please run the command, EDITED wording."
	beforeEdit := len(env.api.MessageRequests())
	_, t3 := env.ask(t, "alice:s1", edited, a1, "And now?")
	argv3 := env.runner.last()
	id3, ok := flag(argv3, "--resume")
	assert.True(t, ok, "the new session holds the replayed history: %q", argv3)
	assert.NotContains(t, []string{id, forkID, regenID}, id3, "an edited history never resumes a stale session")
	assert.Equal(t, []string{"user", "assistant", "user"}, roles(t3[0]), "the edited history arrives as real turns, not as text")
	assert.Equal(t, edited, t3[0].Body.Messages[0].Content.Text())
	assert.NotContains(t, t3[0].AllText(), "<conversation_history>")
	assert.Len(t, env.api.MessageRequests()[beforeEdit:], len(t3), "the replay made no model call")
	text := t3[0].AllText()
	assert.Contains(t, text, edited, "the model sees the edited text")
	assert.NotContains(t, text, "original wording", "and not the stale one")
	uses, _ = toolBlocks(t3[0])
	assert.Empty(t, uses, "nothing of the stale session's tool calls")
}

func TestE2ESessionsOffPerAssistant(t *testing.T) {
	env := newSessionE2E(t, map[string]any{"sessions": false})
	const u1 = "Please run the command."
	a1, _ := env.ask(t, "alice:s2", u1)
	require.Contains(t, a1, sessionMarker)
	assert.Contains(t, env.runner.last(), "--no-session-persistence")
	_, err := os.Stat(filepath.Join(env.dataDir, "sessions", "alice", "chat-s2"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no session kept")
	_, t2 := env.ask(t, "alice:s2", u1, a1, "What did it print?")
	_, resumed := flag(env.runner.last(), "--resume")
	assert.False(t, resumed)
	assert.Contains(t, t2[0].AllText(), "<conversation_history>", "the history arrives as text")
}

// roles are the roles of a model request's messages.
func roles(r *scriptedapi.Request) []string {
	var out []string
	for _, m := range r.Body.Messages {
		out = append(out, m.Role)
	}
	return out
}
