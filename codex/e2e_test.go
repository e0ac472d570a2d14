package codex_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/executor/runnertest"
	"github.com/agentbox/agentbox/internal/jsonl"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	sr "github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/modelproxy"
	"github.com/agentbox/agentbox/services/modelproxy/openairesponses"
)

// connectorKey is the "real" key the model proxy swaps in; it must never
// reach the container.
const connectorKey = "sk-proj-connector-e2e-0123456789abcdef"

// imageVersionLabel names the CLI version in the codex image
// (examples/images/build-offline.sh sets it).
const imageVersionLabel = "io.agentbox.image.codex-version"

// e2eEnv is an executor of the codex image with the helper: Docker, or
// the offline test cluster's pods.
type e2eEnv struct {
	e       executor.Executor
	dataDir string
	version string
	// readWorkspace reads a chat's workspace file after its sandbox is
	// gone (nil: from dataDir on the host).
	readWorkspace func(t testing.TB, chat, name string) string
	// runtime is the OCI runtime of the sandboxes (testenv.Runtime,
	// AGENTBOX_TEST_RUNTIME=runsc in make test-runsc). Under Debian's
	// runsc 20221219 and load the CLI wedged while starting a command;
	// the pinned runsc of .ci/setup does not (DESIGN.md, gVisor under
	// Status).
	runtime string
}

func newE2E(t testing.TB) *e2eEnv {
	t.Helper()
	img := testenv.RequireCodexImage(t)
	dataDir := t.TempDir()
	e, err := docker.New(context.Background(), docker.Options{
		DataDir: dataDir, Image: img, HelperBinary: testenv.HelperBinary(t),
		ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	version := testenv.ImageLabel(t, img, imageVersionLabel)
	require.Contains(t, pins, version, "image %s has CLI version %q, which has no recorded transcripts; record them (testdata/README.md) and add it to pins", img, version)
	return &e2eEnv{e: e, dataDir: dataDir, version: version, runtime: testenv.Runtime(t)}
}

// e2eOpts vary one run.
type e2eOpts struct {
	// upstream and translate replace the scripted Responses API: the
	// connector's URL and the transport translating to its API.
	upstream  string
	translate http.RoundTripper
	stall     time.Duration // stall watchdog (default 2m)
	before    func(sb executor.Sandbox, req executor.RunRequest)
	after     func(sb executor.Sandbox) // runs while the container is still up
	// proxy changes the model proxy's options.
	proxy func(o *modelproxy.Options)
}

// modelSandbox is a sandbox with the helper's model relay.
type modelSandbox interface {
	executor.Sandbox
	ModelBaseURL() string
}

// sandbox creates a sandbox of chat.
func (env *e2eEnv) sandbox(t testing.TB, chat string) modelSandbox {
	t.Helper()
	sb, err := env.e.Create(context.Background(), executor.Spec{
		UserID: "u1", ChatID: chat, AssistantID: "codex-e2e", MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
		Timeout: 5 * time.Minute, LeaseWait: 30 * time.Second, Network: "none", Runtime: env.runtime,
	})
	require.NoError(t, err)
	return sb.(modelSandbox)
}

// e2eRun is the outcome of one run.
type e2eRun struct {
	runnertest.Outcome
	result  executor.ExecResult
	execErr error
	stderr  string
	stdout  []byte
	metered executor.Usage
	calls   []modelproxy.Call
	proxy   string // the model proxy's log
	stop    string // the budget that refused a call (BudgetStop)
	wall    time.Duration
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "tok-" + hex.EncodeToString(b)
}

// run answers req in a fresh container of chat, with the model behind the
// helper's relay, the model proxy serving the Responses API, and the
// scripted API.
func (env *e2eEnv) run(t testing.TB, chat string, api *sr.Server, req executor.RunRequest, o e2eOpts) e2eRun {
	t.Helper()
	ctx := context.Background()
	var out e2eRun
	sb := env.sandbox(t, chat)
	defer func() { _ = sb.Close(context.Background()) }()

	tok := token()
	var plog testenv.SyncBuffer
	upstream, client := "", (*http.Client)(nil)
	if api != nil {
		upstream = api.URL
	}
	if o.translate != nil {
		upstream, client = o.upstream, &http.Client{Transport: o.translate}
	}
	po := modelproxy.Options{
		Upstream: upstream, APIKey: connectorKey, Token: tok, API: modelproxy.APIResponses, Model: "gpt-5.5", Client: client,
		Budget: modelproxy.Budget{MaxRequests: 50, MaxTokens: 10_000_000, MaxDuration: 3 * time.Minute},
		Logger: hclog.New(&hclog.LoggerOptions{Output: &plog, Level: hclog.Debug}),
	}
	if o.proxy != nil {
		o.proxy(&po)
	}
	proxy, err := modelproxy.New(po)
	require.NoError(t, err)
	ln, err := helper.ListenSandbox(ctx, sb, helper.ModelSocket, executor.DefaultUID, executor.DefaultGID)
	require.NoError(t, err)
	go func() { _ = proxy.Serve(ln) }()
	defer func() { _ = proxy.Close() }()

	req.Workdir, req.Home, req.ModelBaseURL, req.APIKey = sb.Workdir(), docker.DefaultHome, sb.ModelBaseURL(), tok
	if req.Model == "" {
		req.Model = "gpt-5.5"
	}
	if o.before != nil {
		o.before(sb, req)
	}
	r := codex.New()
	inv, err := r.Invocation(req)
	require.NoError(t, err)
	stall := o.stall
	if stall == 0 {
		stall = 2 * time.Minute
	}
	runCtx, wd := jsonl.WithWatchdog(ctx, stall)
	defer wd.Stop()
	pr, pw := io.Pipe()
	var stderr, stdout bytes.Buffer
	done := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(done)
		out.result, out.execErr = sb.Exec(runCtx, &executor.Cmd{Args: inv.Args, Env: inv.Env, Stdin: bytes.NewReader(inv.Stdin),
			Stdout: pw, Stderr: &stderr, Timeout: 3 * time.Minute})
		_ = pw.Close()
	}()
	tee := io.TeeReader(wd.Reader(pr), &stdout)
	out.Completion, out.Err = r.Parse(runCtx, tee, func(e executor.Event) error {
		out.Events = append(out.Events, e)
		return nil
	})
	_, _ = io.Copy(io.Discard, pr)
	<-done
	out.wall = time.Since(t0)
	out.Err = codex.WithExit(out.Err, out.result, stderr.String())
	out.stderr, out.stdout = stderr.String(), stdout.Bytes()
	// A call is metered once its upstream body ended, which can be just
	// after the CLI read its last event and exited (a translated stream
	// ends after the CLI has its answer): wait for it, as the middleware
	// does (Settle), before reading the proxy's figures.
	idleCtx, cancelIdle := context.WithTimeout(ctx, 30*time.Second)
	require.NoError(t, proxy.Idle(idleCtx), "a model call still in flight after the CLI exited")
	cancelIdle()
	out.metered, out.calls, out.stop = proxy.Usage(), proxy.Calls(), proxy.BudgetStop()
	if o.after != nil {
		o.after(sb)
	}
	require.NoError(t, sb.Close(context.Background()))
	out.proxy = plog.String()
	if dir := os.Getenv("CODEX_E2E_RECORD"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, chat+".jsonl"), out.stdout, 0o644))
	}
	if t.Failed() || os.Getenv("CODEX_E2E_VERBOSE") != "" {
		t.Logf("stderr: %s\nstdout: %s\nproxy: %s", out.stderr, out.stdout, out.proxy)
	}
	return out
}

func user(s string) []executor.Message { return []executor.Message{{Role: "user", Content: s}} }

// workspaceFile reads a file of a chat's workspace from the host.
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

// TestE2E runs the real CLI of the codex image in real containers, its
// model calls through the helper's relay and the model proxy serving the
// Responses API to the scripted Responses server: the runner conformance
// suite's behaviours live, then what only a live CLI shows.
func TestE2E(t *testing.T) { e2eSuite(t, newE2E(t)) }

// TestE2EKubernetes runs the same suite with the sandboxes as pods of the
// offline test cluster (internal/testkit/k8s/test.sh): the CLI's model
// traffic comes back through the helper's reverse relay over the API
// server's port forward, files through the pod-side file API.
func TestE2EKubernetes(t *testing.T) { e2eSuite(t, newE2EKubernetes(t)) }

func newE2EKubernetes(t *testing.T) *e2eEnv {
	t.Helper()
	kc := testenv.RequireCluster(t)
	sc := os.Getenv("AGENTBOX_K8S_STORAGECLASS")
	if sc == "" {
		sc = "agentbox-local"
	}
	e, err := kubernetes.New(context.Background(), kubernetes.Options{
		Kubeconfig: kc, Namespace: kubernetes.DefaultNamespace, Image: testenv.DefaultCodexImage, ImagePullPolicy: "Never",
		StorageClass: sc, StopGrace: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	// The cluster imported the image from this machine's Docker daemon.
	version := testenv.ImageLabel(t, testenv.DefaultCodexImage, imageVersionLabel)
	require.Contains(t, pins, version)
	return &e2eEnv{e: e, version: version, readWorkspace: func(t testing.TB, chat, name string) string {
		t.Helper()
		sb, err := e.Create(context.Background(), executor.Spec{UserID: "u1", ChatID: chat, LeaseWait: 30 * time.Second})
		require.NoError(t, err)
		defer func() { assert.NoError(t, sb.Close(context.Background())) }()
		b, err := sb.ReadFile(context.Background(), name)
		require.NoError(t, err)
		return string(b)
	}}
}

// TestE2ELocal runs the same suite in local mode: bubblewrap sandboxes
// running the host's codex (.ci/setup installs the pin).
func TestE2ELocal(t *testing.T) { e2eSuite(t, newE2ELocal(t)) }

// newE2ELocal is the e2e environment in local mode. It skips without
// bwrap, root or the host's codex except under CI=true.
func newE2ELocal(t testing.TB) *e2eEnv {
	t.Helper()
	version := strings.TrimPrefix(testenv.RequireLocalMode(t, "codex"), "codex-cli ")
	require.Contains(t, pins, version, "the host's codex is version %q, which has no recorded transcripts", version)
	dataDir := t.TempDir()
	e, err := local.New(context.Background(), local.Options{
		DataDir: dataDir, HelperBinary: testenv.HelperBinary(t), StopGrace: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	return &e2eEnv{e: e, dataDir: dataDir, version: version}
}

// e2eSuite is the end-to-end suite of the real CLI over env's executor.
func e2eSuite(t *testing.T, env *e2eEnv) {

	t.Run("plain", func(t *testing.T) {
		api := sr.Start(sr.WithTurns(sr.Turn{Text: "1+1 = 2.", Usage: &sr.Usage{InputTokens: 1234, CachedTokens: 200, OutputTokens: 56}}))
		defer api.Close()
		run := env.run(t, "plain", api, executor.RunRequest{Messages: user("What is 1+1?"), SystemPrompt: "Answer briefly."}, e2eOpts{})
		runnertest.Check(t, runnertest.Plain, run.Outcome)
		want := executor.Usage{InputTokens: 1034, CacheReadInputTokens: 200, OutputTokens: 56}
		assert.Equal(t, want, run.Completion.Usage, "the CLI's own figures")
		assert.Equal(t, want, run.metered, "what the model proxy metered")
		reqs := api.Requests()
		require.Len(t, reqs, 1, "one call, nothing else")
		got := api.ResponseRequests()[0]
		assert.Equal(t, "/v1/responses", got.Path)
		assert.Equal(t, connectorKey, got.APIKey, "the proxy swapped in the connector's key")
		assert.Equal(t, "gpt-5.5", got.Body.Model)
		assert.True(t, got.Body.Stream)
		assert.Equal(t, "What is 1+1?", got.UserPrompt())
		assert.Contains(t, got.AllText(), "Answer briefly.", "the system prompt is the CLI's developer instructions")
		assert.NotContains(t, run.proxy, "refused", "the CLI called nothing the proxy refuses")
	})

	t.Run("write_and_run", func(t *testing.T) {
		api := sr.Start(sr.WithScript(func(r *sr.Request) sr.Turn {
			res := r.NewToolResults()
			switch {
			case len(res) == 0:
				return sr.Turn{Text: "I'll write the file.", Calls: []sr.Call{sr.ApplyPatch("hello.txt", "hello world\n")}}
			case res[len(res)-1].Name == "apply_patch":
				return sr.Turn{Calls: []sr.Call{sr.Shell("cat hello.txt")}}
			}
			return sr.Say("Done. `cat hello.txt` printed: " + strings.TrimSpace(res[len(res)-1].CommandOutput()))
		}))
		defer api.Close()
		run := env.run(t, "write_and_run", api, executor.RunRequest{Messages: user("Create hello.txt containing hello world, then run cat hello.txt.")}, e2eOpts{})
		runnertest.Check(t, runnertest.WriteAndRun, run.Outcome, runnertest.WriteWithoutContent())
		assert.Equal(t, "hello world\n", env.workspaceFile(t, "write_and_run", "hello.txt"), "on the host after the container is gone")
		assert.Len(t, run.calls, 3)
		assert.Equal(t, run.metered, run.Completion.Usage, "the CLI's total matches what the proxy metered over 3 calls")
	})

	t.Run("failing_tool", func(t *testing.T) {
		api := sr.Start(sr.WithScript(func(r *sr.Request) sr.Turn {
			if len(r.NewToolResults()) == 0 {
				return sr.Turn{Calls: []sr.Call{sr.Shell("cat does-not-exist.txt")}}
			}
			return sr.Say("The command failed: the file does not exist.")
		}))
		defer api.Close()
		run := env.run(t, "failing_tool", api, executor.RunRequest{Messages: user("Run cat does-not-exist.txt.")}, e2eOpts{})
		runnertest.Check(t, runnertest.FailingTool, run.Outcome)
	})

	t.Run("error_result", func(t *testing.T) {
		api := sr.Start(sr.WithScript(func(*sr.Request) sr.Turn { return sr.Fail(sr.ErrUnauthorized) }))
		defer api.Close()
		run := env.run(t, "error_result", api, executor.RunRequest{Messages: user("What is 1+1?"), Arguments: map[string]any{"max_retries": 1}}, e2eOpts{})
		runnertest.Check(t, runnertest.ErrorResult, run.Outcome)
		assert.Equal(t, 401, run.Completion.APIErrorStatus)
		assert.Len(t, run.calls, 2, "max_retries 1: two calls")
		assert.Equal(t, 1, run.result.ExitCode)
	})

	t.Run("write_and_run through Chat Completions", func(t *testing.T) {
		api := scriptedopenai.Start(scriptedopenai.WithScript(func(r *scriptedopenai.Request) scriptedopenai.Turn {
			res := r.NewToolResults()
			switch {
			case len(res) == 0:
				return scriptedopenai.Turn{Text: "I'll write the file.", Calls: []scriptedopenai.Call{
					scriptedopenai.NewCall("apply_patch", map[string]string{"input": sr.Patch("hello.txt", "hello world\n")})}}
			case res[len(res)-1].Name == "apply_patch":
				return scriptedopenai.CallTool("exec_command", map[string]string{"cmd": "cat hello.txt"})
			}
			out := sr.ToolResult{Output: res[len(res)-1].Content}
			return scriptedopenai.Say("Done. `cat hello.txt` printed: " + strings.TrimSpace(out.CommandOutput()))
		}))
		defer api.Close()
		tr, err := openairesponses.NewChat(openairesponses.ChatOptions{BaseURL: api.URL, APIKey: connectorKey, Model: "deepseek-chat", StreamUsage: true})
		require.NoError(t, err)
		run := env.run(t, "chat", nil, executor.RunRequest{Messages: user("Create hello.txt containing hello world, then run cat hello.txt.")},
			e2eOpts{upstream: api.URL, translate: tr})
		runnertest.Check(t, runnertest.WriteAndRun, run.Outcome, runnertest.WriteWithoutContent())
		assert.Equal(t, "hello world\n", env.workspaceFile(t, "chat", "hello.txt"))
		reqs := api.Requests()
		require.Len(t, reqs, 3)
		assert.Equal(t, "deepseek-chat", reqs[0].Body.Model)
		assert.Contains(t, reqs[0].ToolNames(), "apply_patch", "the custom tool as a function")
		assert.Equal(t, connectorKey, reqs[0].APIKey)
		assert.Equal(t, run.metered, run.Completion.Usage, "the CLI's usage is what the proxy metered from the translated answers")
	})

	t.Run("write_and_run through the Messages API", func(t *testing.T) {
		api := scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
			res := r.NewToolResults()
			switch {
			case len(res) == 0:
				return scriptedapi.Turn{Blocks: []scriptedapi.Block{scriptedapi.Text("I'll write the file."),
					scriptedapi.ToolUse("apply_patch", map[string]string{"input": sr.Patch("hello.txt", "hello world\n")})}}
			case res[len(res)-1].Name == "apply_patch":
				return scriptedapi.Call("exec_command", map[string]string{"cmd": "cat hello.txt"})
			}
			out := sr.ToolResult{Output: res[len(res)-1].Result}
			return scriptedapi.Say("Done. `cat hello.txt` printed: " + strings.TrimSpace(out.CommandOutput()))
		}))
		defer api.Close()
		tr, err := openairesponses.NewMessages(openairesponses.MessagesOptions{BaseURL: api.URL, APIKey: connectorKey, Model: "claude-sonnet-4-5"})
		require.NoError(t, err)
		run := env.run(t, "messages", nil, executor.RunRequest{Messages: user("Create hello.txt containing hello world, then run cat hello.txt.")},
			e2eOpts{upstream: api.URL, translate: tr})
		runnertest.Check(t, runnertest.WriteAndRun, run.Outcome, runnertest.WriteWithoutContent())
		assert.Equal(t, "hello world\n", env.workspaceFile(t, "messages", "hello.txt"))
		reqs := api.MessageRequests()
		require.Len(t, reqs, 3)
		assert.Equal(t, "claude-sonnet-4-5", reqs[0].Body.Model)
		assert.Equal(t, connectorKey, reqs[0].APIKey)
		assert.Contains(t, reqs[2].AllText(), "hello world", "the command's output reached the model as a tool result")
		assert.Equal(t, run.metered, run.Completion.Usage)
	})

	t.Run("a resumed session sends the earlier turns as real turns", func(t *testing.T) {
		const id = "4d1c2b3a-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
		file, err := codex.New().TranscriptFile(executor.RunRequest{SessionID: id})
		require.NoError(t, err)
		var transcript []byte
		history := []executor.Message{{Role: "user", Content: "My name is Bob."}, {Role: "assistant", Content: "Hello Bob."}, {Role: "user", Content: "Write name.txt."}}
		api := sr.Start(sr.WithScript(func(r *sr.Request) sr.Turn {
			if len(r.NewToolResults()) == 0 {
				return sr.Turn{Calls: []sr.Call{sr.Shell("echo Bob > name.txt")}}
			}
			return sr.Say("Written.")
		}))
		defer api.Close()
		first := executor.RunRequest{Messages: history, SessionID: id, Resume: true}
		run := env.run(t, "session", api, first, e2eOpts{
			before: func(sb executor.Sandbox, req executor.RunRequest) {
				seed, _, err := codex.New().ReplayTranscript(req)
				require.NoError(t, err)
				require.NoError(t, executor.PlaceHomeFiles(context.Background(), sb, req.Home, map[string][]byte{file: seed}))
			},
			after: func(sb executor.Sandbox) { transcript = readHome(t, sb, file) },
		})
		require.NoError(t, run.Err)
		assert.Equal(t, "Written.", run.Completion.Content)
		assert.Equal(t, id, run.Completion.SessionID, "the CLI resumed the session the gateway named")
		msgs := api.ResponseRequests()[0].Messages("")
		var roles []string
		for _, m := range msgs {
			if m.Role != "developer" && !strings.HasPrefix(m.Content.Text(), "<") {
				roles = append(roles, m.Role+":"+m.Content.Text())
			}
		}
		assert.Equal(t, []string{"user:My name is Bob.", "assistant:Hello Bob.", "user:Write name.txt."}, roles, "history as message items, no text block")
		require.Contains(t, string(transcript), `"sessionId":"`+id+`"`, "the metadata line the middleware checks survives the CLI's appends")

		// The next turn, in a new container, resumes the kept transcript:
		// the model sees the earlier turn's tool call and its output.
		api2 := sr.Start(sr.WithTurns(sr.Say("It says Bob.")))
		defer api2.Close()
		next := executor.RunRequest{Messages: append(append([]executor.Message{}, history...), executor.Message{Role: "assistant", Content: "Written."},
			executor.Message{Role: "user", Content: "What is in name.txt?"}), SessionID: id, Resume: true}
		run2 := env.run(t, "session", api2, next, e2eOpts{before: func(sb executor.Sandbox, req executor.RunRequest) {
			require.NoError(t, executor.PlaceHomeFiles(context.Background(), sb, req.Home, map[string][]byte{file: transcript}))
		}})
		require.NoError(t, run2.Err)
		got := api2.ResponseRequests()[0]
		assert.Equal(t, "What is in name.txt?", got.UserPrompt(), "only the new message is sent on stdin")
		var calls []string
		for _, it := range got.Body.Input {
			if it.Type == "function_call" {
				calls = append(calls, string(it.Arguments))
			}
		}
		require.Len(t, calls, 1)
		assert.Contains(t, calls[0], "name.txt", "the earlier turn's command")
	})

	t.Run("the stall watchdog stops a silent CLI", func(t *testing.T) {
		api := sr.Start(sr.WithTurns(sr.Turn{Stall: true}))
		defer api.Close()
		run := env.run(t, "stall", api, executor.RunRequest{Messages: user("hi")}, e2eOpts{stall: 5 * time.Second})
		require.Error(t, run.Err)
		assert.ErrorIs(t, run.Err, jsonl.ErrStalled)
		assert.True(t, run.Completion.IsError)
	})

	t.Run("a CLI killed mid-run has no result", func(t *testing.T) {
		api := sr.Start(sr.WithTurns(sr.Turn{Calls: []sr.Call{sr.Shell("kill -9 $(pidof codex)")}}))
		defer api.Close()
		run := env.run(t, "killed", api, executor.RunRequest{Messages: user("hi")}, e2eOpts{})
		require.ErrorIs(t, run.Err, codex.ErrNoResult)
		assert.Contains(t, run.Err.Error(), "killed by")
		runnertest.Check(t, runnertest.CutStream, run.Outcome)
	})
}

// readHome reads a file below HOME in sb.
func readHome(t testing.TB, sb executor.Sandbox, name string) []byte {
	t.Helper()
	var out, stderr bytes.Buffer
	res, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"cat", path.Join(docker.DefaultHome, name)}, Stdout: &out, Stderr: &stderr})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "cat %s: %s", name, stderr.String())
	return out.Bytes()
}
