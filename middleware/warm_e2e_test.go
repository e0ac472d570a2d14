package middleware_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
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
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/internal/testkit/cpuprobe"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/middleware/openai"
)

// swapCatalog serves one assistant that a test can replace (a config
// reload).
type swapCatalog struct {
	a atomic.Pointer[middleware.Assistant]
}

func (c *swapCatalog) Lookup(_ context.Context, id string) (*middleware.Assistant, error) {
	if a := c.a.Load(); a.ID == id {
		return a, nil
	}
	return nil, middleware.ErrUnknownAssistant
}

func (c *swapCatalog) List(context.Context) ([]*middleware.Assistant, error) {
	return []*middleware.Assistant{c.a.Load()}, nil
}

// warmE2E is the session e2e stack with the assistant's policy "session".
type warmE2E struct {
	api     *scriptedapi.Server
	dataDir string
	runner  *recordingRunner
	client  sdk.Client
	o       *middleware.Orchestrator
	cat     *swapCatalog
	// first is when the scripted model received its latest request.
	first atomic.Int64
	// warmedUp counts the gateway's log lines of warmed-up pre-started
	// CLIs, warmUpFailed those of refused warm-ups and of pre-started
	// CLIs discarded at their turn.
	warmedUp, warmUpFailed atomic.Int32
}

// logSink is the gateway's log: to the test's log (testWriter), and
// counted where the tests look at it.
type logSink struct {
	testWriter
	env *warmE2E
}

func (w logSink) Write(p []byte) (int, error) {
	switch line := string(p); {
	case strings.Contains(line, "the pre-started CLI is warmed up"):
		w.env.warmedUp.Add(1)
	case strings.Contains(line, "cannot take the turn"), strings.Contains(line, "refused its warm-up"):
		w.env.warmUpFailed.Add(1)
	}
	return w.testWriter.Write(p)
}

// neverUpstream checks that no message of any model request the upstream
// received contains text.
func (env *warmE2E) neverUpstream(t testing.TB, text, msg string) {
	t.Helper()
	for _, r := range env.api.MessageRequests() {
		for _, m := range r.Body.Messages {
			require.NotContains(t, m.Content.Text(), text, msg)
		}
	}
}

// noWarmUpUpstream checks that no warm-up call reached the upstream.
func (env *warmE2E) noWarmUpUpstream(t testing.TB) {
	t.Helper()
	env.neverUpstream(t, claude.WarmUpQuestion, "a warm-up call reached the upstream")
}

// warmAssistant is the "coder" of the session e2e tests with idle.
func warmAssistant(img, upstream string, idle time.Duration) *middleware.Assistant {
	return &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "claude",
		Spec: executor.Spec{Image: img, Timeout: 5 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 30 * time.Second, IdleTTL: idle},
		Run:       executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: map[string]any{"permission_mode": "acceptEdits", "max_turns": 10}},
		Connector: middleware.Connector{Upstream: upstream, Key: connectorKey},
	}}
}

func newWarmE2E(t testing.TB, dataDir, instance string, idle time.Duration, mods ...func(*middleware.Assistant)) *warmE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	return newWarmE2EOn(t, dataDir, func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
		return docker.New(ctx, docker.Options{DataDir: dataDir, Image: img, HelperBinary: bin, Logger: log, InstanceID: instance,
			ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
	}, idle, mods...)
}

// newWarmE2EOn is newWarmE2E on the executor newExec opens.
func newWarmE2EOn(t testing.TB, dataDir string, newExec func(context.Context, hclog.Logger) (executor.Executor, error), idle time.Duration, mods ...func(*middleware.Assistant)) *warmE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	env := &warmE2E{dataDir: dataDir, runner: &recordingRunner{Runner: claude.New()}, cat: &swapCatalog{}}
	env.api = scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
		env.first.CompareAndSwap(0, time.Now().UnixNano())
		if res := r.NewToolResults(); len(res) > 0 {
			return scriptedapi.Say("The command printed " + strings.TrimSpace(res[len(res)-1].Result) + ".")
		}
		if strings.Contains(r.LastUserText(), "run the command") {
			return scriptedapi.Call("Bash", map[string]string{"command": sessionMarkerCmd, "description": "Print the marker"})
		}
		return scriptedapi.Say("Answered without tools.")
	}))
	t.Cleanup(env.api.Close)
	a := warmAssistant(img, env.api.URL, idle)
	for _, m := range mods {
		m(a)
	}
	env.cat.a.Store(a)
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog:     env.cat,
		NewExecutor: newExec,
		Runners:     []executor.Runner{env.runner},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(modelroute.Options{}), nil
		},
		SessionDir:      filepath.Join(dataDir, "sessions"),
		TeardownTimeout: 30 * time.Second,
		Logger:          hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: logSink{testWriter{t}, env}}),
	})
	require.NoError(t, err)
	env.o = o
	t.Cleanup(func() { _ = o.Close() })
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, o.Wrap), Catalog: env.cat, Sandboxes: o})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	env.client = sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return env
}

// testWriter sends the gateway's log to the test's log when -v asks.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() && os.Getenv("AGENTBOX_TEST_LOG") != "" {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// ask sends the conversation and returns the answer, the agent loop's
// model requests, and the times to the first model request and to the
// result.
func (env *warmE2E) ask(t testing.TB, user string, msgs ...string) (string, []*scriptedapi.Request, time.Duration, time.Duration) {
	t.Helper()
	return env.askWith(t, nil, user, msgs...)
}

// askWith is ask with request options (a sandbox header).
func (env *warmE2E) askWith(t testing.TB, opts []option.RequestOption, user string, msgs ...string) (string, []*scriptedapi.Request, time.Duration, time.Duration) {
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
	env.first.Store(0)
	t0 := time.Now()
	comp, err := env.client.Chat.Completions.New(context.Background(), p, opts...)
	took := time.Since(t0)
	require.NoError(t, err)
	first := time.Duration(env.first.Load() - t0.UnixNano())
	reqs := slices.DeleteFunc(env.api.MessageRequests()[before:], func(r *scriptedapi.Request) bool { return len(r.Body.Tools) == 0 })
	require.NotEmpty(t, reqs, "the turn reached the model")
	return comp.Choices[0].Message.Content, reqs, first, took
}

// chatContainers lists the ids of the chat's containers of this data dir.
func chatContainers(t testing.TB, dataDir, chat string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label="+docker.LabelChat+"="+chat,
		"--filter", "label="+docker.LabelDataDir+"="+dataDir).Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

func label(t testing.TB, id, key string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "`+key+`"}}`, id).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

func TestE2ESessionPolicyKeepsTheChatsContainer(t *testing.T) {
	const idle = 4 * time.Second
	dataDir := t.TempDir()
	env := newWarmE2E(t, dataDir, "", idle)
	ctx := context.Background()

	const u1 = "Please run the command."
	conv := []string{u1}
	a1, _, _, _ := env.ask(t, "alice:w1", conv...)
	require.Contains(t, a1, sessionMarker)
	conv = append(conv, a1)
	require.NoError(t, env.o.Settle(ctx))
	ids := chatContainers(t, dataDir, "w1")
	require.Len(t, ids, 1, "the chat's container is kept after the turn")
	kept := ids[0]
	assert.Equal(t, docker.PolicySession, label(t, kept, docker.LabelPolicy))
	assert.Equal(t, idle.String(), label(t, kept, docker.LabelIdleTTL))

	for turn := 2; turn <= 5; turn++ {
		conv = append(conv, fmt.Sprintf("Thanks. Turn %d: what did it print?", turn))
		answer, reqs, first, took := env.ask(t, "alice:w1", conv...)
		conv = append(conv, answer)
		uses, results := toolBlocks(reqs[0])
		assert.Len(t, uses, 1, "turn %d's model request carries turn 1's tool_use", turn)
		if assert.Len(t, results, 1) {
			assert.Contains(t, results[0], sessionMarker)
		}
		_, resumed := flag(env.runner.last(), "--resume")
		assert.True(t, resumed, "turn %d resumes the session", turn)
		require.NoError(t, env.o.Settle(ctx))
		assert.Equal(t, []string{kept}, chatContainers(t, dataDir, "w1"), "turn %d ran in the same container", turn)
		t.Logf("turn %d: first model request after %v, result after %v", turn, first.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	// Each warm turn's CLI did a model call's work before its message,
	// answered by the gateway alone.
	assert.GreaterOrEqual(t, env.warmedUp.Load(), int32(4), "the pre-started CLIs of turns 2-5 were warmed up")
	assert.Zero(t, env.warmUpFailed.Load(), "no warm-up failed or was refused")
	env.noWarmUpUpstream(t)

	// Idle past idle_ttl: the container goes, the workspace and the
	// session stay.
	require.Eventually(t, func() bool { return len(chatContainers(t, dataDir, "w1")) == 0 }, idle+30*time.Second, 200*time.Millisecond,
		"the kept container is removed after idle_ttl")
	_, err := os.Stat(filepath.Join(dataDir, "sessions", "alice", "chat-w1", "coder", "transcript.jsonl"))
	require.NoError(t, err, "the session outlives the container")

	conv = append(conv, "Turn 6: and what did it print at first?")
	answer6, reqs6, _, _ := env.ask(t, "alice:w1", conv...)
	conv = append(conv, answer6)
	uses, _ := toolBlocks(reqs6[0])
	assert.Len(t, uses, 1, "turn 6 starts cold and still continues the conversation with turn 1's tool_use")
	_, resumed := flag(env.runner.last(), "--resume")
	assert.True(t, resumed)
	require.NoError(t, env.o.Settle(ctx))
	ids6 := chatContainers(t, dataDir, "w1")
	require.Len(t, ids6, 1)
	assert.NotEqual(t, kept, ids6[0], "turn 6 has a new container")

	// A config change never reuses the kept container.
	changed := *env.cat.a.Load()
	sb := *changed.Sandbox
	sb.Spec.PidsLimit = 300
	changed.Sandbox = &sb
	env.cat.a.Store(&changed)
	conv = append(conv, "Turn 7, after a config change.")
	_, _, _, _ = env.ask(t, "alice:w1", conv...)
	require.NoError(t, env.o.Settle(ctx))
	ids7 := chatContainers(t, dataDir, "w1")
	require.Len(t, ids7, 1, "the stale container is gone")
	assert.NotEqual(t, ids6[0], ids7[0], "a new container for the new options")

	// Close removes the kept container.
	require.NoError(t, env.o.Close())
	assert.Empty(t, chatContainers(t, dataDir, "w1"), "shutdown removes kept containers")
}

func TestE2ESessionCreateHookChangesTheCLIsStart(t *testing.T) {
	const french = "Answer in French from now on."
	var turn atomic.Int32
	h := hooks.Funcs{CreateFunc: func(_ context.Context, _ *hooks.Context, msgs []executor.Message) (*hooks.CreateResult, error) {
		if turn.Add(1) < 2 {
			return nil, nil
		}
		// From turn 2 on the hook adds a system message: the CLI's system
		// prompt differs from the pre-started one's.
		return &hooks.CreateResult{Messages: append([]executor.Message{{Role: "system", Content: french}}, msgs...)}, nil
	}}
	dataDir := t.TempDir()
	env := newWarmE2E(t, dataDir, "", time.Minute, func(a *middleware.Assistant) { a.Hooks = h })
	ctx := context.Background()
	a1, _, _, _ := env.ask(t, "alice:h1", "Please run the command.")
	require.Contains(t, a1, sessionMarker)
	require.NoError(t, env.o.Settle(ctx))
	kept := chatContainers(t, dataDir, "h1")
	require.Len(t, kept, 1)

	n := env.runner.count() // turn 2's invocation comes next
	a2, reqs, _, _ := env.ask(t, "alice:h1", "Please run the command.", a1, "What did it print?")
	first, ok := flag(env.runner.nth(n-1), "--resume") // the CLI pre-started after turn 1
	require.True(t, ok)
	began, _ := flag(env.runner.nth(n), "--resume")
	assert.NotEqual(t, first, began, "turn 2 does not resume a session begun under another system prompt")
	// The CLI started for turn 2 carries the hook's system prompt, not the
	// pre-started one's, and it reaches the model. Claude Code 2.1.330
	// keeps a resumed session's system prompt, so a changed prompt starts
	// a new session with the history replayed as real turns (its
	// transcript written by the gateway, resumed with --resume).
	assert.Contains(t, reqs[0].Body.System.Text(), french, "the CLI that answered was started with the hook's system prompt")
	uses, _ := toolBlocks(reqs[0])
	assert.Empty(t, uses, "a new session: the tool calls of turn 1 are not in it")
	assert.Contains(t, string(reqs[0].Raw), "Please run the command.", "the history is replayed")
	assert.Contains(t, string(reqs[0].Raw), sessionMarker, "with turn 1's answer")
	require.NoError(t, env.o.Settle(ctx))
	assert.Equal(t, kept, chatContainers(t, dataDir, "h1"), "in the same container")

	// Turn 3 under the same prompt resumes the session turn 2 began.
	n = env.runner.count()
	_, reqs, _, _ = env.ask(t, "alice:h1", "Please run the command.", a1, "What did it print?", a2, "And now?")
	id, resumed := flag(env.runner.nth(n), "--resume")
	assert.True(t, resumed, "turn 3 resumes")
	assert.Equal(t, began, id, "the session turn 2 began")
	assert.Contains(t, reqs[0].Body.System.Text(), french)
	require.NoError(t, env.o.Settle(ctx))
	assert.Equal(t, kept, chatContainers(t, dataDir, "h1"))
}

// cgroupCPU returns the CPU time the container has used, from its
// cgroup's cpu.stat (v2) or cpuacct.usage (v1).
func cgroupCPU(t testing.TB, id string) (time.Duration, bool) {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", id).Output()
	require.NoError(t, err)
	cg, err := os.ReadFile("/proc/" + strings.TrimSpace(string(out)) + "/cgroup")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[2], "cpu.stat"))
			if err != nil {
				continue
			}
			for l := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					return time.Duration(n) * time.Microsecond, true
				}
			}
		case strings.Contains(parts[1], "cpuacct"):
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", parts[2], "cpuacct.usage"))
			if err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return time.Duration(n), true
			}
		}
	}
	return 0, false
}

// waitQuiet waits until the containers spend under 2% of a core over
// half a second: a pre-started CLI is up and waiting.
func waitQuiet(t testing.TB, ids []string) {
	t.Helper()
	sum := func() time.Duration {
		var s time.Duration
		for _, id := range ids {
			d, _ := cgroupCPU(t, id)
			s += d
		}
		return s
	}
	deadline := time.Now().Add(time.Minute)
	prev := sum()
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		cur := sum()
		if cur-prev < 10*time.Millisecond {
			return
		}
		prev = cur
	}
	t.Fatalf("containers %v still busy after a minute", ids)
}

// cgroupMemory is a container's memory as its cgroup counts it: all of it
// (page cache of the image's files included) and the anonymous part (the
// processes' heaps, which is what a kept session holds for itself).
func cgroupMemory(t testing.TB, id string) (total, anon int64, ok bool) {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", id).Output()
	require.NoError(t, err)
	cg, err := os.ReadFile("/proc/" + strings.TrimSpace(string(out)) + "/cgroup")
	if err != nil {
		return 0, 0, false
	}
	stat := func(file, key string) int64 {
		b, _ := os.ReadFile(file)
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, key+" "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	num := func(file string) int64 {
		b, _ := os.ReadFile(file)
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir := filepath.Join("/sys/fs/cgroup", parts[2])
			return num(filepath.Join(dir, "memory.current")), stat(filepath.Join(dir, "memory.stat"), "anon"), true
		case parts[1] == "memory":
			dir := filepath.Join("/sys/fs/cgroup/memory", parts[2])
			return num(filepath.Join(dir, "memory.usage_in_bytes")), stat(filepath.Join(dir, "memory.stat"), "total_rss"), true
		}
	}
	return 0, 0, false
}

// TestE2ESessionIdleCPU measures the kept container's CPU over 60 s
// (AGENTBOX_IDLE_CPU_WINDOW shortens it).
func TestE2ESessionIdleCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60 s measurement")
	}
	window := 60 * time.Second
	if v := os.Getenv("AGENTBOX_IDLE_CPU_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		window = d
	}
	dataDir := t.TempDir()
	env := newWarmE2E(t, dataDir, "", window+time.Minute)
	a1, _, _, _ := env.ask(t, "alice:cpu", "Please run the command.")
	require.Contains(t, a1, sessionMarker)
	require.NoError(t, env.o.Settle(context.Background()))
	ids := chatContainers(t, dataDir, "cpu")
	require.Len(t, ids, 1)
	// The next turn's CLI is starting right after the turn (its own
	// start costs about 2 s of CPU here); the idle state follows it.
	start, ok := cgroupCPU(t, ids[0])
	if !ok {
		t.Skip("the container's cgroup is not readable from here")
	}
	time.Sleep(30 * time.Second)
	before, _ := cgroupCPU(t, ids[0])
	t.Logf("the pre-started CLI's start took %v CPU", before-start)
	procs := func() string {
		out, _ := exec.Command("docker", "exec", ids[0], "sh", "-c",
			`for d in /proc/[0-9]*; do read -r a b c d4 e f g h i j k l m u s rest < $d/stat 2>/dev/null && echo "$(cat $d/cmdline | tr '\0' ' ' | cut -c1-60) utime=$u stime=$s"; done`).Output()
		return string(out)
	}
	p0 := procs()
	time.Sleep(window)
	after, _ := cgroupCPU(t, ids[0])
	used := after - before
	t.Logf("processes (clock ticks) before:\n%s\nafter:\n%s", p0, procs())
	t.Logf("idle kept container (pre-started CLI waiting): %v CPU over %v = %.3f%% of one core", used, window, 100*used.Seconds()/window.Seconds())
	if total, anon, ok := cgroupMemory(t, ids[0]); ok {
		// Sizing: a kept session holds its anonymous memory (the cache
		// of the image's files is shared and reclaimable) and its idle CPU.
		t.Logf("idle kept container memory: %d MiB (anonymous %d MiB): %.1f sessions per GiB, %.0f per core idle",
			total>>20, anon>>20, float64(1<<30)/float64(max(anon, 1)), window.Seconds()/max(used.Seconds(), 1e-3))
	}
	// Not paused, so not 0: the waiting CLI's (node) timers remain, 3.5%
	// of a core measured on a machine at load 23 (2 cores). A leftover
	// busy process would take a whole core.
	assert.Less(t, used.Seconds()/window.Seconds(), 0.05, "an idle kept container uses under 5%% of a core")
	// Still the same container, and it still answers warm.
	a2, reqs, _, _ := env.ask(t, "alice:cpu", "Please run the command.", a1, "What did it print?")
	assert.Equal(t, "Answered without tools.", a2)
	uses, _ := toolBlocks(reqs[0])
	assert.Len(t, uses, 1)
	require.NoError(t, env.o.Settle(context.Background()))
	assert.Equal(t, ids, chatContainers(t, dataDir, "cpu"))
}

// TestE2ESessionGatewayKilled kills a gateway process (-9) that keeps a
// session container, restarts it, and finds nothing left.
func TestE2ESessionGatewayKilled(t *testing.T) {
	testenv.RequireImage(t)
	dataDir := t.TempDir()
	const instance = "killed0gateway"
	cmd := exec.Command(os.Args[0], "-test.run=^TestWarmGatewayProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTBOX_WARM_GATEWAY="+dataDir, "AGENTBOX_WARM_INSTANCE="+instance)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	kept := ""
	for sc.Scan() {
		if id, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "KEPT "); ok {
			kept = id
			break
		}
	}
	require.NotEmpty(t, kept, "the gateway process kept a container")
	require.Equal(t, []string{kept}, chatContainers(t, dataDir, "k1"))
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no Close, no teardown
	_ = cmd.Wait()
	require.Equal(t, []string{kept}, chatContainers(t, dataDir, "k1"), "the kill left the kept container behind")

	// The restart: the same instance's executor reconciles at start.
	img := testenv.RequireImage(t)
	ex, err := docker.New(context.Background(), docker.Options{DataDir: dataDir, Image: img, InstanceID: instance,
		ReconcileInterval: -1, RetentionInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, ex.Close()) }()
	require.Eventually(t, func() bool { return len(chatContainers(t, dataDir, "k1")) == 0 }, 30*time.Second, 100*time.Millisecond,
		"the restarted gateway removed the dead instance's kept container")
}

// TestWarmGatewayProcess is the gateway that TestE2ESessionGatewayKilled
// kills: it answers one turn with the session policy, prints the kept
// container's id and waits to be killed.
func TestWarmGatewayProcess(t *testing.T) {
	dataDir := os.Getenv("AGENTBOX_WARM_GATEWAY")
	if dataDir == "" {
		t.Skip("run by TestE2ESessionGatewayKilled")
	}
	env := newWarmE2E(t, dataDir, os.Getenv("AGENTBOX_WARM_INSTANCE"), time.Hour)
	a, _, _, _ := env.ask(t, "alice:k1", "Please run the command.")
	require.Contains(t, a, sessionMarker)
	require.NoError(t, env.o.Settle(context.Background()))
	ids := chatContainers(t, dataDir, "k1")
	require.Len(t, ids, 1)
	fmt.Println("KEPT " + ids[0])
	time.Sleep(10 * time.Minute)
}

// BenchmarkSessionTurn measures, in one run, a cold request (request
// policy, new chat) to its result, a warm turn (session policy, kept
// container, pre-started CLI) to its first model request and to its
// result, and the first request in a pre-warmed client sandbox (a new
// chat in a kept container with a CLI started for a new session) to both. Run with -benchtime=7x for seven rounds.
func BenchmarkSessionTurn(b *testing.B) {
	coldDir, warmDir := b.TempDir(), b.TempDir()
	cold := newWarmE2E(b, coldDir, "", 0)
	warm := newWarmE2E(b, warmDir, "", 10*time.Minute)
	ctx := context.Background()
	var coldRes, coldFirst, warmRes, warmFirst, preRes, preFirst, coldCPU, warmCPU []time.Duration
	// window measures the CPU f costs the processes around the turn (this
	// process, the Docker daemon, the turn's containers) until it settled.
	window := func(dataDir string, f func()) time.Duration {
		p, err := cpuprobe.Start(cpuprobe.Options{Owns: func(l map[string]string) bool { return l[docker.LabelDataDir] == dataDir }})
		require.NoError(b, err)
		f()
		return p.Stop().Total()
	}
	const u1 = "Say something."
	a1, _, _, _ := warm.ask(b, "alice:bench", u1)
	conv := []string{u1, a1}
	require.NoError(b, warm.o.Settle(ctx))
	b.ResetTimer()
	for i := range b.N {
		var first, took time.Duration
		coldCPU = append(coldCPU, window(coldDir, func() {
			_, _, first, took = cold.ask(b, "alice:cold"+strconv.Itoa(i), u1)
			require.NoError(b, cold.o.Settle(ctx))
		}))
		coldFirst, coldRes = append(coldFirst, first), append(coldRes, took)

		conv = append(conv, fmt.Sprintf("Turn %d.", i+2))
		// A warm turn's CPU includes pre-starting the next turn's CLI (the
		// state the turn found), which runs after Settle returns: the
		// window ends when the kept container is quiet again.
		warmCPU = append(warmCPU, window(warmDir, func() {
			var answer string
			answer, _, first, took = warm.ask(b, "alice:bench", conv...)
			conv = append(conv, answer)
			require.NoError(b, warm.o.Settle(ctx))
			waitQuiet(b, chatContainers(b, warmDir, "bench"))
		}))
		warmFirst, warmRes = append(warmFirst, first), append(warmRes, took)

		// A client sandbox pre-warmed before its first message.
		id := "pw" + strconv.Itoa(i)
		_, err := warm.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: id, Assistant: "coder", Prewarm: true})
		require.NoError(b, err)
		// The client pre-warms while its user types: the CLI's start (about
		// 2 s of CPU) is done before the message, as it is for a warm
		// turn after its previous one.
		b.StopTimer()
		time.Sleep(3 * time.Second)
		b.StartTimer()
		_, _, first, took = warm.askWith(b, []option.RequestOption{option.WithHeader("X-Agentbox-Sandbox", id)}, "alice:pre"+strconv.Itoa(i), u1)
		preFirst, preRes = append(preFirst, first), append(preRes, took)
		require.NoError(b, warm.o.Settle(ctx))
		require.NoError(b, warm.o.DeleteSandbox(ctx, "alice", id))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50(coldFirst)), "cold-first-ms")
	b.ReportMetric(ms(p50(coldRes)), "cold-result-ms")
	b.ReportMetric(ms(p50(warmFirst)), "warm-first-ms")
	b.ReportMetric(ms(p50(warmRes)), "warm-result-ms")
	b.ReportMetric(ms(p50(warmRes))/ms(p50(coldRes)), "warm/cold")
	b.ReportMetric(ms(p50(preFirst)), "prewarmed-first-ms")
	b.ReportMetric(ms(p50(preRes)), "prewarmed-result-ms")
	b.ReportMetric(ms(p50(coldCPU)), "cold-cpu-ms")
	b.ReportMetric(ms(p50(warmCPU)), "warm-cpu-ms")
	b.Logf("cold result %v, warm first model request %v, warm result %v, pre-warmed sandbox first model request %v, result %v; CPU cold %v, warm %v",
		coldRes, warmFirst, warmRes, preFirst, preRes, coldCPU, warmCPU)
}

// TestE2ESessionSpoiledWarmUp: a pre-started CLI that does anything but
// its warm-up (here, a whole turn of its own, as a CLI that changed what
// a side question does would) never takes a request: the turn resets the
// container and starts a new CLI, and neither the upstream nor the
// session's transcript ever sees what that CLI did.
func TestE2ESessionSpoiledWarmUp(t *testing.T) {
	const planted = "PLANTED-WARM-UP-TURN"
	env := newWarmE2E(t, t.TempDir(), "", 10*time.Minute)
	line := `{"type":"user","message":{"role":"user","content":"` + planted + `"}}` + "\n"
	env.runner.warmUp.Store(&line)
	ctx := context.Background()
	conv := []string{"Please run the command."}
	a1, _, _, _ := env.ask(t, "alice:spoil", conv...)
	require.Contains(t, a1, sessionMarker)
	conv = append(conv, a1)
	require.NoError(t, env.o.Settle(ctx))
	for turn := 2; turn <= 3; turn++ {
		conv = append(conv, fmt.Sprintf("Thanks. Turn %d: what did it print?", turn))
		answer, reqs, _, _ := env.ask(t, "alice:spoil", conv...)
		conv = append(conv, answer)
		assert.Equal(t, "Answered without tools.", answer)
		uses, _ := toolBlocks(reqs[0])
		assert.Len(t, uses, 1, "turn %d continues the session with turn 1's tool_use", turn)
		require.NoError(t, env.o.Settle(ctx))
		assert.Equal(t, int32(turn-1), env.warmUpFailed.Load(), "turn %d discarded the spoiled CLI", turn)
	}
	assert.Zero(t, env.warmedUp.Load())
	env.neverUpstream(t, planted, "the spoiled CLI's turn reached the upstream or the session")
}

// TestE2EPrewarmedSandboxStartsTheCLI: pre-warming a client sandbox
// starts its container and a CLI for a new session before any message;
// the first request of a new chat in it takes that CLI (same session id)
// and continues in the same container.
func TestE2EPrewarmedSandboxStartsTheCLI(t *testing.T) {
	dataDir := t.TempDir()
	env := newWarmE2E(t, dataDir, "", 0)
	ctx := context.Background()
	n := env.runner.count()
	sb, err := env.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "pw", Assistant: "coder", Prewarm: true})
	require.NoError(t, err)
	assert.Equal(t, middleware.SandboxWarm, sb.State)
	ids := chatContainers(t, dataDir, "_sbx.pw")
	require.Len(t, ids, 1, "the container is up before the first message")
	require.Equal(t, n+1, env.runner.count(), "a CLI was started ahead")
	preSession, ok := flag(env.runner.last(), "--session-id")
	require.True(t, ok, "for a new session: %v", env.runner.last())
	// The CLI's exec is on its way when CreateSandbox returns.
	require.Eventually(t, func() bool {
		top, err := exec.Command("docker", "top", ids[0], "-eo", "pid,args").CombinedOutput()
		return err == nil && strings.Contains(string(top), preSession)
	}, time.Minute, 100*time.Millisecond, "the CLI waits in the container")

	answer, _, first, took := env.askWith(t, []option.RequestOption{option.WithHeader("X-Agentbox-Sandbox", "pw")}, "alice:p1", "Please run the command.")
	assert.Contains(t, answer, sessionMarker)
	got, ok := flag(env.runner.last(), "--session-id")
	require.True(t, ok)
	assert.Equal(t, preSession, got, "the first request adopted the pre-started CLI's session")
	assert.Equal(t, int32(1), env.warmedUp.Load(), "the CLI for a new session was warmed up")
	assert.Zero(t, env.warmUpFailed.Load())
	env.noWarmUpUpstream(t)
	require.NoError(t, env.o.Settle(ctx))
	assert.Equal(t, ids, chatContainers(t, dataDir, "_sbx.pw"), "in the pre-warmed container, kept after the turn")
	t.Logf("pre-warmed sandbox: first model request after %v, result after %v", first.Round(time.Millisecond), took.Round(time.Millisecond))
}

// TestE2ESessionPolicyKubernetes: the session policy on pods (the cluster
// of AGENTBOX_KUBECONFIG, internal/k8s/test.sh): the chat's pod is kept
// (parked) after a turn, the next turns run in it with the session
// resumed, and shutdown removes it.
func TestE2ESessionPolicyKubernetes(t *testing.T) {
	kc := testenv.RequireCluster(t)
	img := testenv.RequireImage(t)
	ko := kubernetes.Options{Kubeconfig: kc, Image: img, ImagePullPolicy: "Never", StorageClass: "agentbox-local"}
	env := newWarmE2EOn(t, t.TempDir(), func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
		o := ko
		o.Logger = log
		return kubernetes.New(ctx, o)
	}, time.Minute)
	obs, err := kubernetes.New(t.Context(), kubernetes.Options{Kubeconfig: kc, ReconcileInterval: -1})
	require.NoError(t, err)
	defer func() { assert.NoError(t, obs.Close()) }()
	chat := "kept-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pods := func() []string {
		inv, err := obs.Inventory(t.Context())
		require.NoError(t, err)
		var names []string
		for _, p := range inv.Pods {
			if p.Chat == chat && !p.Deleting && !p.Checkpoint {
				names = append(names, p.Name)
			}
		}
		return names
	}
	ctx := context.Background()
	conv := []string{"Please run the command."}
	a1, _, _, took := env.ask(t, "alice:"+chat, conv...)
	require.Contains(t, a1, sessionMarker)
	conv = append(conv, a1)
	require.NoError(t, env.o.Settle(ctx))
	kept := pods()
	require.Len(t, kept, 1, "the chat's pod is kept after the turn")
	t.Logf("turn 1 (cold): %v", took.Round(time.Millisecond))
	for turn := 2; turn <= 3; turn++ {
		// A user reads the answer before writing: the pre-started CLI
		// has time to boot (about 2 s of CPU in the pod).
		time.Sleep(5 * time.Second)
		conv = append(conv, fmt.Sprintf("Thanks. Turn %d: what did it print?", turn))
		answer, reqs, first, took := env.ask(t, "alice:"+chat, conv...)
		conv = append(conv, answer)
		_, results := toolBlocks(reqs[0])
		if assert.Len(t, results, 1, "turn %d's model request carries turn 1's tool result", turn) {
			assert.Contains(t, results[0], sessionMarker)
		}
		_, resumed := flag(env.runner.last(), "--resume")
		assert.True(t, resumed, "turn %d resumes the session", turn)
		require.NoError(t, env.o.Settle(ctx))
		assert.Equal(t, kept, pods(), "turn %d ran in the same pod", turn)
		t.Logf("turn %d (warm): first model request after %v, result after %v", turn, first.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	require.NoError(t, env.o.Close())
	assert.Empty(t, pods(), "shutdown removes the kept pod")
}
