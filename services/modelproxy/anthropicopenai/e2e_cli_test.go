package anthropicopenai_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
)

// cliRun is the outcome of one host CLI run.
type cliRun struct {
	comp   executor.Completion
	stdout string
	stderr string
	wall   time.Duration
}

// runCLI runs the real Claude Code CLI on the host with its model behind
// an Anthropic-shaped server that translates to provider.
func runCLI(t *testing.T, provider *scriptedopenai.Server, o anthropicopenai.Options, prompt string, extra ...string) cliRun {
	t.Helper()
	bin, err := exec.LookPath("claude")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("CI=true and the claude CLI is not on PATH: %v", err)
		}
		t.Skipf("the claude CLI is not on PATH (%v); install @anthropic-ai/claude-code (set CI=true to make this a failure)", err)
	}
	o.BaseURL, o.APIKey = provider.URL, "sk-provider-e2e"
	tr, err := anthropicopenai.New(o)
	require.NoError(t, err)
	target, _ := url.Parse("http://anthropic.invalid")
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport, rp.FlushInterval = tr, -1
	front := httptest.NewServer(rp)
	defer front.Close()

	home := t.TempDir()
	work := t.TempDir()
	args := append([]string{"-p", "--output-format", "stream-json", "--verbose"}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The prompt goes on stdin: --allowedTools takes every argument after it.
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(prompt)
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"SHELL=/bin/bash", "LANG=C.UTF-8",
		"ANTHROPIC_BASE_URL=" + front.URL, "ANTHROPIC_API_KEY=sk-container-token",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_MAX_RETRIES=" + strconv.Itoa(claude.DefaultMaxRetries),
		"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	_ = cmd.Run() // the CLI exits 1 on an API error; the parsed result says why
	out := cliRun{stdout: stdout.String(), stderr: stderr.String(), wall: time.Since(t0)}
	out.comp, err = claude.New().Parse(ctx, strings.NewReader(out.stdout), func(executor.Event) error { return nil })
	if err != nil || t.Failed() || os.Getenv("CLAUDE_E2E_VERBOSE") != "" {
		for _, r := range provider.Requests() {
			t.Logf("provider request %d: %.3000s", r.Seq, r.Raw)
		}
		t.Logf("parse: %v\nstderr: %s\nstdout: %s", err, out.stderr, out.stdout)
	}
	if dir := os.Getenv("CLAUDE_E2E_RECORD"); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "openai-"+name+".jsonl"), stdout.Bytes(), 0o644))
	}
	return out
}

// mainCalls are the provider calls that offered tools: the agent loop's,
// not the CLI's side calls (titles, summaries).
func mainCalls(s *scriptedopenai.Server) []*scriptedopenai.Request {
	var out []*scriptedopenai.Request
	for _, r := range s.Requests() {
		if len(r.Body.Tools) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func TestCLIEndToEnd(t *testing.T) {
	t.Run("tool call then answer", func(t *testing.T) {
		usage := scriptedopenai.Usage{PromptTokens: 3000, CompletionTokens: 40, CachedTokens: 2048}
		provider := scriptedopenai.Start(scriptedopenai.WithScript(func(r *scriptedopenai.Request) scriptedopenai.Turn {
			if len(r.Body.Tools) == 0 {
				return scriptedopenai.Say("side answer")
			}
			res := r.NewToolResults()
			if len(res) == 0 {
				return scriptedopenai.Turn{Reasoning: "I should run echo.", Text: "Running it.", Pieces: 9, Usage: &usage,
					Calls: []scriptedopenai.Call{scriptedopenai.NewCall("Bash", map[string]string{"command": "echo hi", "description": "Say hi ✓"})}}
			}
			return scriptedopenai.Turn{Text: "Bash printed: " + strings.TrimSpace(res[0].Content), Usage: &usage}
		}))
		defer provider.Close()
		run := runCLI(t, provider, anthropicopenai.Options{StreamUsage: true, Model: "deepseek-chat"}, "say hi with bash", "--allowedTools", "Bash")
		require.False(t, run.comp.IsError, "errors: %v", run.comp.Errors)
		assert.True(t, strings.HasSuffix(run.comp.Content, "Bash printed: hi"), "content: %q", run.comp.Content)
		calls := mainCalls(provider)
		require.Len(t, calls, 2, "one call for the tool, one for the answer")
		assert.Equal(t, "deepseek-chat", calls[0].Body.Model)
		assert.True(t, calls[0].Body.Stream)
		assert.True(t, calls[0].Body.StreamOptions.IncludeUsage)
		assert.Equal(t, "Bearer sk-provider-e2e", calls[0].Header.Get("Authorization"), "the provider gets the connector key, not the container's")
		res := calls[1].NewToolResults()
		require.Len(t, res, 1)
		assert.Equal(t, "Bash", res[0].Name)
		assert.Equal(t, "hi", strings.TrimSpace(res[0].Content))
		assert.Contains(t, run.comp.Content, "hi")
		// The CLI sums the two main calls' usage from the translated figures.
		assert.EqualValues(t, 2*usage.CompletionTokens, run.comp.Usage.OutputTokens)
		assert.EqualValues(t, 2*usage.CachedTokens, run.comp.Usage.CacheReadInputTokens)
		assert.EqualValues(t, 2*(usage.PromptTokens-usage.CachedTokens), run.comp.Usage.InputTokens)
		t.Logf("done in %s; usage %+v", run.wall.Round(time.Millisecond), run.comp.Usage)
	})

	for _, tc := range []struct {
		name      string
		err       *scriptedopenai.APIError
		status    int
		calls     int
		errSubstr string
	}{
		{name: "provider 429", err: &scriptedopenai.APIError{Status: 429, Message: "Rate limit reached for requests", RetryAfter: "1"}, status: 429, calls: 1 + claude.DefaultMaxRetries, errSubstr: "Rate limit reached"},
		{name: "provider 500", err: &scriptedopenai.APIError{Status: 500, Message: "The server had an error while processing your request"}, status: 500, calls: 1 + claude.DefaultMaxRetries, errSubstr: "server had an error"},
		{name: "provider context too long", err: scriptedopenai.ContextTooLong(), status: 400, calls: 1, errSubstr: "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			provider := scriptedopenai.Start(scriptedopenai.WithScript(func(r *scriptedopenai.Request) scriptedopenai.Turn {
				if len(r.Body.Tools) == 0 {
					return scriptedopenai.Say("side answer")
				}
				return scriptedopenai.Fail(tc.err)
			}))
			defer provider.Close()
			run := runCLI(t, provider, anthropicopenai.Options{StreamUsage: true}, "hi", "--allowedTools", "Bash")
			assert.True(t, run.comp.IsError)
			assert.Equal(t, executor.FinishError, run.comp.FinishReason)
			assert.Equal(t, tc.status, run.comp.APIErrorStatus)
			require.NotEmpty(t, run.comp.Errors)
			assert.Contains(t, strings.Join(run.comp.Errors, "\n"), tc.errSubstr, "the CLI says what the provider said")
			n := len(mainCalls(provider))
			assert.Equal(t, tc.calls, n, "the CLI retries 429 and 5xx CLAUDE_CODE_MAX_RETRIES times, a too-long prompt never")
			t.Logf("%s: failed in %s after %d provider calls: %v", tc.name, run.wall.Round(time.Millisecond), n, run.comp.Errors)
		})
	}
}
