package claude_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/executor/runnertest"
	"github.com/agentbox/agentbox/internal/jsonl"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/modelproxy"
)

// connectorKey is the "real" key the model proxy swaps in; it must never
// reach the container.
const connectorKey = "sk-ant-connector-e2e-0123456789abcdef"

// e2eEnv is an executor with the helper (Docker, or bubblewrap in local
// mode), shared by the e2e tests of one test function.
type e2eEnv struct {
	e       executor.Executor
	dataDir string
	// version is the CLI version the image's label names; cli is what
	// that version does where versions differ.
	version string
	cli     cliBehaviour
	// runtime is the OCI runtime of the sandboxes (testenv.Runtime).
	runtime string
	// readWorkspace reads a chat's workspace file after its sandbox is
	// gone (nil: from dataDir on the host).
	readWorkspace func(t testing.TB, chat, name string) string
}

// relaySandbox is a sandbox with the helper's model relay (both backends).
type relaySandbox interface {
	executor.Sandbox
	ModelBaseURL() string
}

// newE2ELocal is the e2e environment in local mode: bubblewrap sandboxes
// running the host's claude. It skips without bwrap, root or the CLI
// except under CI=true.
func newE2ELocal(t testing.TB) *e2eEnv {
	t.Helper()
	out := testenv.RequireLocalMode(t, "claude")
	dataDir := t.TempDir()
	e, err := local.New(context.Background(), local.Options{
		DataDir: dataDir, HelperBinary: testenv.HelperBinary(t), StopGrace: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	version, _, _ := strings.Cut(out, " ")
	cli, ok := cliBehaviours[version]
	require.True(t, ok, "the host's claude is version %q, which cliBehaviours does not list; run the e2e tests against it and record what differs", version)
	return &e2eEnv{e: e, dataDir: dataDir, version: version, cli: cli, runtime: testenv.Runtime(t)}
}

// cliBehaviour is what differs between the CLI versions the e2e tests
// know: the pin and the previous pin (examples/images/VERSIONS), so that
// `make test-claude-previous` shows what a bump changed.
type cliBehaviour struct {
	// resumesBrokenStreams: a model stream that breaks off (an error
	// event, a dropped connection) is followed by a synthetic user
	// message asking the model to resume, and a second model call,
	// instead of a failed result.
	resumesBrokenStreams bool
	// backgroundSubagents: the Task tool runs a subagent in the
	// background unless its input says run_in_background: false; the
	// main agent's turn ends, and the subagent's completion starts
	// another turn with its own result line.
	backgroundSubagents bool
	// reports529Status: a run that failed on repeated 529s has
	// api_error_status 529 in its result (2.1.197 leaves it null).
	reports529Status bool
}

var cliBehaviours = map[string]cliBehaviour{
	"2.1.197": {},
	"2.1.330": {resumesBrokenStreams: true, backgroundSubagents: true, reports529Status: true},
}

// imageVersionLabel names the CLI version in the sandbox image
// (examples/images/build-offline.sh sets it).
const imageVersionLabel = "io.agentbox.image.claude-code-version"

func newE2E(t testing.TB) *e2eEnv {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	dataDir := t.TempDir()
	e, err := docker.New(context.Background(), docker.Options{
		DataDir: dataDir, Image: img, HelperBinary: bin,
		ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	version := testenv.ImageLabel(t, img, imageVersionLabel)
	cli, ok := cliBehaviours[version]
	require.True(t, ok, "image %s has CLI version %q (label %s), which cliBehaviours does not list; run the e2e tests against it and record what differs", img, version, imageVersionLabel)
	return &e2eEnv{e: e, dataDir: dataDir, version: version, cli: cli, runtime: testenv.Runtime(t)}
}

// e2eOpts vary one run.
type e2eOpts struct {
	stall  time.Duration // stall watchdog (default 2m)
	before func(sb executor.Sandbox)
	after  func(sb executor.Sandbox) // runs while the container is still up
}

// e2eRun is the outcome of one run.
type e2eRun struct {
	events  []executor.Event
	comp    executor.Completion
	err     error
	result  executor.ExecResult
	execErr error
	stderr  string
	stdout  []byte
	metered executor.Usage
	calls   []modelproxy.Call
	wall    time.Duration
	create  time.Duration
	close   time.Duration
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "tok-" + hex.EncodeToString(b)
}

// run answers req in a fresh container of chat, with the model behind the
// helper's relay, the model proxy and the scripted API.
func (env *e2eEnv) run(t testing.TB, chat string, api *scriptedapi.Server, req executor.RunRequest, o e2eOpts) e2eRun {
	t.Helper()
	ctx := context.Background()
	var out e2eRun
	t0 := time.Now()
	sbi, err := env.e.Create(ctx, executor.Spec{
		UserID: "u1", ChatID: chat, AssistantID: "claude-e2e", MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
		Timeout: 5 * time.Minute, LeaseWait: 30 * time.Second, Network: "none", Runtime: env.runtime,
	})
	require.NoError(t, err)
	out.create = time.Since(t0)
	sb := sbi.(relaySandbox)
	closed := false
	defer func() {
		if !closed {
			_ = sb.Close(context.Background())
		}
	}()

	tok := token()
	proxy, err := modelproxy.New(modelproxy.Options{
		Upstream: api.URL, APIKey: connectorKey, Token: tok,
		Budget: modelproxy.Budget{MaxRequests: 50, MaxTokens: 10_000_000, MaxDuration: 3 * time.Minute},
	})
	require.NoError(t, err)
	ln, err := helper.ListenSandbox(ctx, sb, helper.ModelSocket, executor.DefaultUID, executor.DefaultGID)
	require.NoError(t, err)
	go func() { _ = proxy.Serve(ln) }()
	defer func() { _ = proxy.Close() }()

	req.Workdir = sb.Workdir()
	req.Home = docker.DefaultHome
	req.ModelBaseURL = sb.ModelBaseURL()
	req.APIKey = tok
	require.NotEmpty(t, req.ModelBaseURL, "the sandbox has no model relay")
	if o.before != nil {
		o.before(sb)
	}
	r := claude.New()
	inv, err := r.Invocation(req)
	require.NoError(t, err)
	for name, data := range inv.Files {
		require.NoError(t, sb.WriteFile(ctx, name, data))
	}

	stall := o.stall
	if stall == 0 {
		// A loaded CI machine (2 cores, several test processes) has kept
		// the CLI silent for over a minute before its first line.
		stall = 2 * time.Minute
	}
	runCtx, wd := jsonl.WithWatchdog(ctx, stall)
	defer wd.Stop()
	pr, pw := io.Pipe()
	var stderr, stdout bytes.Buffer
	var mu sync.Mutex
	done := make(chan struct{})
	t1 := time.Now()
	go func() {
		defer close(done)
		out.result, out.execErr = sb.Exec(runCtx, &executor.Cmd{
			Args: inv.Args, Env: inv.Env, Stdin: bytes.NewReader(inv.Stdin),
			Stdout: pw, Stderr: &stderr, Timeout: 3 * time.Minute,
		})
		_ = pw.Close()
	}()
	tee := io.TeeReader(wd.Reader(pr), writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return stdout.Write(p)
	}))
	out.comp, out.err = r.Parse(runCtx, tee, func(e executor.Event) error {
		out.events = append(out.events, e)
		return nil
	})
	_, _ = io.Copy(io.Discard, pr)
	<-done
	out.wall = time.Since(t1)
	out.err = claude.WithExit(out.err, out.result, stderr.String())
	out.stderr = stderr.String()
	out.stdout = stdout.Bytes()
	// A call is metered once its upstream body ended, which can be just
	// after the CLI exited: wait for it, as the middleware does (Settle).
	idleCtx, cancelIdle := context.WithTimeout(context.Background(), 30*time.Second)
	require.NoError(t, proxy.Idle(idleCtx), "a model call still in flight after the CLI exited")
	cancelIdle()
	out.metered = proxy.Usage()
	out.calls = proxy.Calls()
	if o.after != nil {
		o.after(sb)
	}
	t2 := time.Now()
	require.NoError(t, sb.Close(context.Background()))
	out.close = time.Since(t2)
	closed = true
	if dir := os.Getenv("CLAUDE_E2E_RECORD"); dir != "" {
		name := filepath.Join(dir, chat+".jsonl")
		for i := 2; ; i++ {
			if _, err := os.Stat(name); err != nil {
				break
			}
			name = filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", chat, i))
		}
		require.NoError(t, os.WriteFile(name, out.stdout, 0o644))
	}
	if t.Failed() || os.Getenv("CLAUDE_E2E_VERBOSE") != "" {
		t.Logf("stderr: %s\nstdout: %s", out.stderr, out.stdout)
	}
	return out
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func user(s string) []executor.Message { return []executor.Message{{Role: "user", Content: s}} }

func (r e2eRun) ofKind(k executor.EventKind) []executor.Event {
	var out []executor.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// workspaceFile reads a file of a chat's workspace straight from the host.
func (env *e2eEnv) workspaceFile(t testing.TB, chat, name string) string {
	t.Helper()
	if env.readWorkspace != nil {
		return env.readWorkspace(t, chat, name)
	}
	dir, err := executor.WorkspaceDir(env.dataDir, "u1", chat)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return string(b)
}

func TestE2E(t *testing.T) { e2eSuite(t, newE2E(t)) }

// TestE2EKubernetes runs the same suite with the sandboxes as pods of the
// offline test cluster (internal/k8s/test.sh): the CLI's model traffic
// comes back through the helper's reverse relay over the API server's port
// forward, files through the pod-side file API, workspaces on claims of
// AGENTBOX_K8S_STORAGECLASS (agentbox-local when unset); no Docker call.
func TestE2EKubernetes(t *testing.T) { e2eSuite(t, newE2EKubernetes(t)) }

func newE2EKubernetes(t *testing.T) *e2eEnv {
	t.Helper()
	kc := testenv.RequireCluster(t)
	sc := os.Getenv("AGENTBOX_K8S_STORAGECLASS")
	if sc == "" {
		sc = "agentbox-local"
	}
	// The namespace of the test cluster (up.sh makes it).
	e, err := kubernetes.New(context.Background(), kubernetes.Options{
		Kubeconfig: kc, Namespace: kubernetes.DefaultNamespace, Image: testenv.DefaultImage, ImagePullPolicy: "Never",
		StorageClass: sc, StopGrace: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	// The cluster imported the image from this machine's Docker daemon.
	version := testenv.ImageLabel(t, testenv.DefaultImage, imageVersionLabel)
	cli, ok := cliBehaviours[version]
	require.True(t, ok, "image has CLI version %q, which cliBehaviours does not list", version)
	return &e2eEnv{e: e, version: version, cli: cli, readWorkspace: func(t testing.TB, chat, name string) string {
		t.Helper()
		sb, err := e.Create(context.Background(), executor.Spec{UserID: "u1", ChatID: chat, LeaseWait: 30 * time.Second})
		require.NoError(t, err)
		defer func() { assert.NoError(t, sb.Close(context.Background())) }()
		b, err := sb.ReadFile(context.Background(), name)
		require.NoError(t, err)
		return string(b)
	}}
}

// TestE2ELocal runs the same suite in local mode (executor/local).
func TestE2ELocal(t *testing.T) { e2eSuite(t, newE2ELocal(t)) }

// e2eSuite is the end-to-end suite of the real CLI over env's executor.
func e2eSuite(t *testing.T, env *e2eEnv) {

	t.Run("plain answer with usage", func(t *testing.T) {
		usage := scriptedapi.Usage{InputTokens: 1234, OutputTokens: 56, CacheCreationInputTokens: 78, CacheReadInputTokens: 910}
		api := scriptedapi.Start(scriptedapi.WithTurns(scriptedapi.Turn{Blocks: []scriptedapi.Block{scriptedapi.Text("1+1 is 2.")}, Usage: &usage}))
		defer api.Close()
		run := env.run(t, "plain", api, executor.RunRequest{Messages: user("What is 1+1?"), Model: "claude-sonnet-4-6"}, e2eOpts{})
		require.NoError(t, run.err)
		require.Equal(t, 0, run.result.ExitCode)
		assert.Equal(t, "1+1 is 2.", run.comp.Content)
		assert.Equal(t, executor.FinishStop, run.comp.FinishReason)
		want := executor.Usage{InputTokens: 1234, OutputTokens: 56, CacheCreationInputTokens: 78, CacheReadInputTokens: 910}
		assert.Equal(t, want, run.comp.Usage, "the CLI's own figures")
		assert.Equal(t, want, run.metered, "what the model proxy metered")
		require.Equal(t, executor.EventInit, run.events[0].Kind)
		assert.Equal(t, env.version, run.events[0].Init.Version, "the CLI the image's label names")
		msgs := api.MessageRequests()
		require.Len(t, msgs, 1)
		assert.Equal(t, connectorKey, msgs[0].APIKey, "the proxy swapped in the connector's key")
		assert.Equal(t, "claude-sonnet-4-6", msgs[0].Body.Model)
		assert.Contains(t, msgs[0].LastUserText(), "What is 1+1?")
	})

	t.Run("write and cat persist in the workspace", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(executor.ContainerWorkdir)))
		defer api.Close()
		run := env.run(t, "files", api, executor.RunRequest{Messages: user("Write hello.txt and cat it.")}, e2eOpts{})
		require.NoError(t, run.err)
		assert.Equal(t, "I'll write the file.\n\nDone. `cat hello.txt` printed: hello from the sandbox", run.comp.Content)
		var tools []string
		for _, e := range run.events {
			switch e.Kind {
			case executor.EventToolUse:
				tools = append(tools, "use:"+e.Tool.Name)
			case executor.EventToolResult:
				tools = append(tools, fmt.Sprintf("result:error=%v", e.ToolResult.IsError))
			}
		}
		assert.Equal(t, []string{"use:Write", "result:error=false", "use:Bash", "result:error=false"}, tools)
		assert.Equal(t, scriptedapi.DemoContent, env.workspaceFile(t, "files", scriptedapi.DemoFile), "on the host after the container is gone")
		assert.Equal(t, run.metered, run.comp.Usage, "the CLI's cumulative usage matches what the proxy metered over 3 calls")
		assert.Len(t, run.calls, 3)

		// The next request of the same chat, in a new container, sees it.
		next := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			if res := r.NewToolResults(); len(res) > 0 {
				return scriptedapi.Say("it says: " + strings.TrimSpace(res[0].Result))
			}
			return scriptedapi.Call("Bash", map[string]string{"command": "cat hello.txt", "description": "read it"})
		}))
		defer next.Close()
		run2 := env.run(t, "files", next, executor.RunRequest{Messages: user("What does hello.txt say?")}, e2eOpts{})
		require.NoError(t, run2.err)
		assert.Equal(t, "it says: hello from the sandbox", run2.comp.Content)
	})

	t.Run("three turn conversation reaches the model", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			return scriptedapi.Say("noted")
		}))
		defer api.Close()
		msgs := []executor.Message{
			{Role: "user", Content: "My name is Bob."},
			{Role: "assistant", Content: "Nice to meet you, Bob."},
			{Role: "user", Content: "I live in Lisbon."},
			{Role: "assistant", Content: "Lisbon is lovely."},
			{Role: "user", Content: "Where do I live, and what is my name?"},
		}
		run := env.run(t, "history", api, executor.RunRequest{Messages: msgs, SystemPrompt: "Answer in one line."}, e2eOpts{})
		require.NoError(t, run.err)
		reqs := api.MessageRequests()
		require.Len(t, reqs, 1, "one model call: history is not replayed as separate prompts")
		seen := reqs[0].AllText()
		for _, m := range msgs {
			assert.Contains(t, seen, m.Content, "the model sees %s's %q", m.Role, m.Content)
		}
		last := reqs[0].LastUserText()
		assert.Less(t, strings.Index(last, "Nice to meet you, Bob."), strings.Index(last, "Where do I live"), "history comes before the question")
		assert.Contains(t, reqs[0].Body.System.Text(), "Answer in one line.")
	})

	t.Run("max turns exceeded finishes with length", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			return scriptedapi.Call("Bash", map[string]string{"command": "echo again", "description": "loop"})
		}))
		defer api.Close()
		run := env.run(t, "maxturns", api, executor.RunRequest{Messages: user("loop"), Arguments: map[string]any{"max_turns": 2}}, e2eOpts{})
		require.NoError(t, run.err, "the CLI reported the overflow in its result")
		assert.True(t, run.comp.IsError)
		assert.Equal(t, executor.FinishMaxTurns, run.comp.FinishReason)
		assert.Equal(t, "error_max_turns", run.comp.Subtype)
		assert.NotEmpty(t, run.comp.Errors)
	})

	for _, tc := range []struct {
		name    string
		err     *scriptedapi.APIError
		status  int
		retried bool // the CLI retries this status (api_retry lines)
	}{
		{"upstream 401 fails fast", scriptedapi.ErrUnauthorized, 401, true},
		{"upstream 500 fails fast", scriptedapi.ErrInternal, 500, true},
		{"upstream 400 prompt too long", scriptedapi.ErrPromptTooLong, 400, false},
		// 404: a streaming then a non-streaming call, no api_retry (transcript d7).
		{"upstream 404 model not found", scriptedapi.ErrModelNotFound, 404, false},
		{"upstream 429 rate limited", scriptedapi.ErrRateLimited, 429, true},
		{"upstream 529 overloaded", scriptedapi.ErrOverloaded, 529, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := scriptedapi.Start(scriptedapi.WithScript(func(*scriptedapi.Request) scriptedapi.Turn { return scriptedapi.Fail(tc.err) }))
			defer api.Close()
			run := env.run(t, fmt.Sprintf("err%d", tc.status), api, executor.RunRequest{Messages: user("hi")}, e2eOpts{})
			require.NoError(t, run.err)
			assert.True(t, run.comp.IsError)
			assert.Equal(t, executor.FinishError, run.comp.FinishReason)
			if tc.status != 529 || env.cli.reports529Status {
				assert.Equal(t, tc.status, run.comp.APIErrorStatus)
			} else {
				assert.Zero(t, run.comp.APIErrorStatus, "this CLI reports repeated 529s without a status (transcript d3)")
			}
			assert.NotEmpty(t, run.comp.Errors)
			assert.Empty(t, run.comp.Content)
			// Bounded retries, not a three-minute storm: counted in model
			// calls, not wall time, which a loaded machine stretches.
			assert.LessOrEqual(t, len(api.MessageRequests()), 1+claude.DefaultMaxRetries, "at most the bounded retries")
			if tc.retried {
				assert.Len(t, run.ofKind(executor.EventRetry), len(api.MessageRequests())-1, "each retry is an event")
			} else {
				assert.Empty(t, run.ofKind(executor.EventRetry))
			}
			t.Logf("failed in %s after %d model calls: %v", run.wall.Round(time.Millisecond), len(api.MessageRequests()), run.comp.Errors)
		})
	}

	t.Run("stalled model is cut off by the watchdog", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(*scriptedapi.Request) scriptedapi.Turn {
			return scriptedapi.Turn{Blocks: []scriptedapi.Block{scriptedapi.Text("never")}, Stall: scriptedapi.StallAfterStart}
		}))
		defer api.Close()
		run := env.run(t, "stall", api, executor.RunRequest{Messages: user("hi")}, e2eOpts{stall: 3 * time.Second})
		require.Error(t, run.err)
		assert.ErrorIs(t, run.err, jsonl.ErrStalled)
		assert.True(t, run.comp.IsError)
		t.Logf("cut off after %s: %v", run.wall.Round(time.Millisecond), run.err)
	})

	t.Run("thinking and text", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithTurns(scriptedapi.Turn{Blocks: []scriptedapi.Block{
			scriptedapi.Thinking("The user wants a sum. 1+1 is 2."), scriptedapi.Text("1+1 is 2."),
		}}))
		defer api.Close()
		run := env.run(t, "thinking", api, executor.RunRequest{Messages: user("What is 1+1?")}, e2eOpts{})
		require.NoError(t, run.err)
		assert.Equal(t, "1+1 is 2.", run.comp.Content, "thinking is not content")
		var thinking strings.Builder
		for _, e := range run.ofKind(executor.EventThinking) {
			thinking.WriteString(e.Text)
		}
		assert.Equal(t, "The user wants a sum. 1+1 is 2.", thinking.String())
	})

	// A resumed answer: the CLI's second call continues the first one's
	// text, and the parser reports the resumption as a retry.
	checkResumed := func(t *testing.T, run e2eRun, api *scriptedapi.Server) {
		t.Helper()
		require.NoError(t, run.err)
		assert.False(t, run.comp.IsError, run.comp.Errors)
		assert.Equal(t, executor.FinishStop, run.comp.FinishReason)
		reqs := api.MessageRequests()
		require.Len(t, reqs, 2, "the CLI called the model again to resume")
		assert.Contains(t, reqs[1].AllText(), "partial answer", "the resumed call sees the broken text")
		assert.Equal(t, "partial answer, resumed.", run.comp.Content, "the continuation joins the broken text without a separator")
		retries := run.ofKind(executor.EventRetry)
		require.Len(t, retries, 1, "the resumption is an event")
		assert.Contains(t, retries[0].Text, "resume")
		for _, e := range run.ofKind(executor.EventText) {
			assert.NotContains(t, e.Text, "cut off", "the CLI's resume request is not assistant text")
		}
	}
	resume := scriptedapi.WithScript(func(*scriptedapi.Request) scriptedapi.Turn { return scriptedapi.Say(", resumed.") })

	t.Run("error event mid-stream", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithTurns(
			scriptedapi.Turn{Blocks: []scriptedapi.Block{scriptedapi.Text("partial answer"), scriptedapi.Text("never sent")}, MidStreamError: scriptedapi.ErrOverloaded},
		), resume)
		defer api.Close()
		run := env.run(t, "midstream", api, executor.RunRequest{Messages: user("hi")}, e2eOpts{})
		if env.cli.resumesBrokenStreams {
			checkResumed(t, run, api)
			return
		}
		require.NoError(t, run.err, "the CLI reports the failure in its result")
		assert.True(t, run.comp.IsError)
		assert.Equal(t, executor.FinishError, run.comp.FinishReason)
		assert.Equal(t, []string{"API Error: Overloaded"}, run.comp.Errors)
		assert.Len(t, api.MessageRequests(), 1, "the CLI does not retry an error event")
		assert.Equal(t, "partial answer", run.comp.Content, "the text already streamed stays the content")
	})

	t.Run("connection dropped mid-stream", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithTurns(
			scriptedapi.Turn{Blocks: []scriptedapi.Block{scriptedapi.Text("partial answer"), scriptedapi.Text("never sent")}, Disconnect: true},
		), resume)
		defer api.Close()
		run := env.run(t, "dropped", api, executor.RunRequest{Messages: user("hi")}, e2eOpts{})
		if env.cli.resumesBrokenStreams {
			checkResumed(t, run, api)
			return
		}
		require.NoError(t, run.err)
		assert.Len(t, api.MessageRequests(), 1, "the CLI does not retry a dropped stream")
		assert.Equal(t, "partial answer", run.comp.Content)
		assert.True(t, run.comp.IsError, "the CLI calls the cut answer a success; the parser must not")
		assert.Equal(t, executor.FinishError, run.comp.FinishReason)
		require.NotEmpty(t, run.comp.Errors)
		assert.Contains(t, run.comp.Errors[0], "broke off")
	})

	t.Run("300 KiB prompt", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			return scriptedapi.Say(fmt.Sprintf("got %d bytes", len(r.LastUserText())))
		}))
		defer api.Close()
		big := strings.Repeat("0123456789abcdef", 300<<10/16) + " END"
		run := env.run(t, "big", api, executor.RunRequest{Messages: user(big)}, e2eOpts{})
		require.NoError(t, run.err)
		assert.False(t, run.comp.IsError, run.comp.Errors)
		reqs := api.MessageRequests()
		require.NotEmpty(t, reqs)
		assert.Contains(t, reqs[0].LastUserText(), big, "the whole prompt reached the model")
	})

	t.Run("200 KiB system prompt through a file", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithTurns(scriptedapi.Say("ok")))
		defer api.Close()
		system := "Follow these rules.\n" + strings.Repeat("Rule: be precise. ", 200<<10/18) + "END OF RULES"
		run := env.run(t, "longsystem", api, executor.RunRequest{Messages: user("hi"), SystemPrompt: system}, e2eOpts{})
		require.NoError(t, run.err)
		assert.False(t, run.comp.IsError, run.comp.Errors)
		reqs := api.MessageRequests()
		require.NotEmpty(t, reqs)
		assert.Contains(t, reqs[0].Body.System.Text(), system, "the whole system prompt reached the model")
	})

	t.Run("skill appears in init", func(t *testing.T) {
		// The gateway's skills are user skills (HOME/.claude/skills); the
		// workspace's .claude is the agent's and does not load, but its
		// CLAUDE.md does.
		api := scriptedapi.Start(scriptedapi.WithTurns(scriptedapi.Say("ok")))
		defer api.Close()
		skill := func(name string) []byte {
			return []byte("---\nname: " + name + "\ndescription: Greets the user warmly. Use when asked to greet.\n---\n\n# Greeter\nSay GREETINGS.\n")
		}
		run := env.run(t, "skill", api, executor.RunRequest{Messages: user("hi")}, e2eOpts{before: func(sb executor.Sandbox) {
			ctx := context.Background()
			require.NoError(t, executor.PlaceHomeFiles(ctx, sb, docker.DefaultHome, map[string][]byte{".claude/skills/greeter/SKILL.md": skill("greeter")}))
			require.NoError(t, sb.WriteFile(ctx, ".claude/skills/planted/SKILL.md", skill("planted")))
			require.NoError(t, sb.WriteFile(ctx, "CLAUDE.md", []byte("PROJECT-MEMORY-SENTINEL\n")))
		}})
		require.NoError(t, run.err)
		require.Equal(t, executor.EventInit, run.events[0].Kind)
		assert.Contains(t, run.events[0].Init.Skills, "greeter")
		assert.NotContains(t, run.events[0].Init.Skills, "planted", "project skills do not load")
		assert.Contains(t, run.events[0].Init.Tools, "Skill")
		reqs := api.MessageRequests()
		require.NotEmpty(t, reqs)
		assert.Contains(t, reqs[0].AllText(), "PROJECT-MEMORY-SENTINEL", "the workspace's CLAUDE.md reaches the model")
	})

	// The shared runner contract on this CLI's live output, so a run
	// against another pin (make test-claude-previous) checks it there too.
	t.Run("runner conformance on live output", func(t *testing.T) {
		script := func(s scriptedapi.Script) *scriptedapi.Server { return scriptedapi.Start(scriptedapi.WithScript(s)) }
		apis := map[runnertest.Behaviour]*scriptedapi.Server{
			runnertest.Plain: script(func(*scriptedapi.Request) scriptedapi.Turn { return scriptedapi.Say("1+1 is 2.") }),
			runnertest.WriteAndRun: script(func(r *scriptedapi.Request) scriptedapi.Turn {
				res := r.NewToolResults()
				switch {
				case len(res) == 0:
					return scriptedapi.Call("Write", map[string]string{"file_path": executor.ContainerWorkdir + "/hello.txt", "content": "hello world"})
				case res[0].Name == "Write":
					return scriptedapi.Call("Bash", map[string]string{"command": "cat hello.txt", "description": "print it"})
				}
				return scriptedapi.Say("It says: " + strings.TrimSpace(res[0].Result))
			}),
			runnertest.FailingTool: script(func(r *scriptedapi.Request) scriptedapi.Turn {
				if res := r.NewToolResults(); len(res) > 0 {
					return scriptedapi.Say("The command failed: " + strings.TrimSpace(res[0].Result))
				}
				return scriptedapi.Call("Bash", map[string]string{"command": "echo failing >&2; exit 3", "description": "fail"})
			}),
			runnertest.ErrorResult: script(func(*scriptedapi.Request) scriptedapi.Turn { return scriptedapi.Fail(scriptedapi.ErrUnauthorized) }),
		}
		tr := runnertest.Transcripts{}
		for b, api := range apis {
			defer api.Close()
			run := env.run(t, "conformance-"+string(b), api, executor.RunRequest{Messages: user("What is 1+1?")}, e2eOpts{})
			tr[b] = run.stdout
		}
		runnertest.Run(t, claude.New(), tr)
	})

	t.Run("subagent tool calls carry their parent", func(t *testing.T) {
		const task = "SUBAGENT-TASK: run echo from-subagent and report what it printed"
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			res := r.NewToolResults()
			if len(r.Body.Messages) > 0 && strings.Contains(r.Body.Messages[0].Content.Text(), "SUBAGENT-TASK") {
				if len(res) > 0 {
					return scriptedapi.Say("subagent saw: " + strings.TrimSpace(res[0].Result))
				}
				return scriptedapi.Call("Bash", map[string]string{"command": "echo from-subagent", "description": "echo"})
			}
			delegated := false
			for _, m := range r.Body.Messages {
				for _, b := range m.Content {
					delegated = delegated || b.Type == "tool_use" && b.Name == "Task"
				}
			}
			if len(res) > 0 || delegated {
				return scriptedapi.Say("main done")
			}
			input := map[string]any{"description": "run echo", "prompt": task, "subagent_type": "general-purpose"}
			if env.cli.backgroundSubagents {
				input["run_in_background"] = false
			}
			return scriptedapi.Call("Task", input)
		}))
		defer api.Close()
		run := env.run(t, "subagent", api, executor.RunRequest{Messages: user("delegate the echo")}, e2eOpts{})
		require.NoError(t, run.err)
		assert.False(t, run.comp.IsError, run.comp.Errors)
		assert.Equal(t, "main done", run.comp.Content, "the subagent's text is not the answer")
		uses := run.ofKind(executor.EventToolUse)
		require.Len(t, uses, 2, "the Task call and the subagent's Bash call")
		parent, sub := uses[0].Tool, uses[1].Tool
		assert.Equal(t, "Task", parent.Name)
		assert.Empty(t, parent.ParentToolUseID, "the main agent's call has no parent")
		assert.Equal(t, "Bash", sub.Name)
		assert.Equal(t, parent.ID, sub.ParentToolUseID, "the subagent's call names the Task call")
		results := map[string]*executor.ToolResult{}
		for _, e := range run.ofKind(executor.EventToolResult) {
			results[e.ToolResult.ToolUseID] = e.ToolResult
		}
		require.Contains(t, results, sub.ID)
		assert.Equal(t, parent.ID, results[sub.ID].ParentToolUseID)
		assert.Contains(t, results[sub.ID].Content, "from-subagent")
		require.Contains(t, results, parent.ID)
		assert.Empty(t, results[parent.ID].ParentToolUseID)
	})

	t.Run("background work ends the answer, not the first result", func(t *testing.T) {
		if !env.cli.backgroundSubagents {
			t.Skip("this CLI runs subagents in the foreground")
		}
		// A backgrounded subagent and a backgrounded Bash command: the
		// main agent's turn ends first ("launched"), and each completion
		// starts another main turn, where the answer the user wants is.
		const task = "SUBAGENT-TASK: run echo from-subagent and report what it printed"
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			res := r.NewToolResults()
			switch {
			case len(r.ToolNames()) == 0:
				return scriptedapi.Say("side call")
			case len(r.Body.Messages) > 0 && strings.Contains(r.Body.Messages[0].Content.Text(), "SUBAGENT-TASK"):
				if len(res) > 0 {
					return scriptedapi.Say("subagent saw: " + strings.TrimSpace(res[0].Output()))
				}
				return scriptedapi.Call("Bash", map[string]string{"command": "sleep 1; echo from-subagent", "description": "echo"})
			case strings.Contains(r.LastUserText(), "task-notification"):
				return scriptedapi.Say("REPORT-TURN " + strings.TrimSpace(r.LastUserText()))
			case len(res) > 0:
				return scriptedapi.Say("launched")
			case strings.Contains(r.UserPrompt(), "subagent"):
				return scriptedapi.Call("Task", map[string]any{"description": "run echo", "prompt": task, "subagent_type": "general-purpose"})
			default:
				return scriptedapi.Call("Bash", map[string]any{"command": "sleep 1; echo from-background", "description": "wait", "run_in_background": true})
			}
		}))
		defer api.Close()
		for _, c := range []struct{ name, prompt, report string }{
			{"background-subagent", "delegate the echo to a subagent", "subagent saw: from-subagent"},
			{"background-bash", "run the command in the background", "completed"},
		} {
			run := env.run(t, c.name, api, executor.RunRequest{Messages: user(c.prompt)}, e2eOpts{})
			require.NoError(t, run.err, c.name)
			assert.False(t, run.comp.IsError, "%s: %v", c.name, run.comp.Errors)
			assert.Contains(t, run.comp.Content, "launched", c.name)
			assert.Contains(t, run.comp.Content, "REPORT-TURN", "%s: the turn that the completion started is part of the answer", c.name)
			assert.Contains(t, run.comp.Content, c.report, c.name)
		}
	})

	t.Run("connector key is nowhere in the container", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			if res := r.NewToolResults(); len(res) > 0 {
				return scriptedapi.Say("checked")
			}
			return scriptedapi.Call("Bash", map[string]string{"command": "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'", "description": "env"})
		}))
		defer api.Close()
		var scan []byte
		const marker = "agentbox-scan-marker-7f3a"
		run := env.run(t, "key", api, executor.RunRequest{Messages: user("show env")}, e2eOpts{
			before: func(sb executor.Sandbox) {
				require.NoError(t, sb.WriteFile(context.Background(), "marker.txt", []byte(marker)))
			},
			after: func(sb executor.Sandbox) {
				// Dump every process's env and argv and the writable and
				// config trees to the host; the dumping process itself
				// never holds the key, so a hit is a leak.
				var out bytes.Buffer
				_, err := sb.Exec(context.Background(), &executor.Cmd{
					Args: []string{"sh", "-c", "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; done 2>/dev/null; " +
						"find /workspace /home /tmp /run/agentbox /etc -type f 2>/dev/null | while read -r f; do head -c 8000000 \"$f\"; done; true"},
					Stdout: &out, Timeout: time.Minute,
				})
				require.NoError(t, err)
				scan = out.Bytes()
			}})
		require.NoError(t, run.err)
		results := run.ofKind(executor.EventToolResult)
		require.Len(t, results, 1)
		envOut := results[0].ToolResult.Content
		assert.Contains(t, envOut, "ANTHROPIC_API_KEY=tok-", "the CLI's tools see the per-request token")
		assert.NotContains(t, envOut, connectorKey)
		require.Contains(t, string(scan), marker, "the scan reads the workspace")
		assert.NotContains(t, string(scan), connectorKey, "no file and no process in the container holds the connector's key")
		assert.NotContains(t, string(scan), connectorKey[len(connectorKey)-16:])
		for _, r := range api.MessageRequests() {
			assert.NotContains(t, r.AllText(), connectorKey, "nothing the model saw came with the key")
		}
	})
}
