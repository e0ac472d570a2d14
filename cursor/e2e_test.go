package cursor_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/runnertest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// buildStandin compiles the cursor-agent stand-in as a static binary.
func buildStandin(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "cursor-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./internal/standin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the stand-in: %s", msg)
	return out
}

// e2eRun is one run of the runner's invocation inside a real container.
type e2eRun struct {
	outcome runnertest.Outcome
	result  executor.ExecResult
	execErr error
	stderr  string
	sandbox executor.Sandbox
}

// runInSandbox builds the invocation for req, places its files and the
// stand-in in a real sandbox, runs it through Sandbox.Exec and parses the
// output as it streams.
func runInSandbox(t *testing.T, sb executor.Sandbox, standin, transcript string, req executor.RunRequest) e2eRun {
	t.Helper()
	ctx := context.Background()
	// The per-sandbox host directory is mounted at /run/agentbox: the
	// stand-in and its transcript go there, out of the workspace.
	bin, err := os.ReadFile(standin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sb.HostDir(), "cursor-agent"), bin, 0o755))
	raw, err := os.ReadFile(transcript)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sb.HostDir(), "transcript.jsonl"), raw, 0o644))

	r := cursor.New(cursor.WithProgram(docker.ContainerHostDir + "/cursor-agent"))
	inv, err := r.Invocation(req)
	require.NoError(t, err)
	for name, data := range inv.Files {
		require.NoError(t, sb.WriteFile(ctx, name, data))
	}
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	run := e2eRun{sandbox: sb}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run.result, run.execErr = sb.Exec(ctx, &executor.Cmd{
			Args:    inv.Args,
			Env:     append(inv.Env, "CURSOR_STANDIN_TRANSCRIPT="+docker.ContainerHostDir+"/transcript.jsonl"),
			Stdin:   bytes.NewReader(inv.Stdin),
			Stdout:  pw,
			Stderr:  &stderr,
			Timeout: time.Minute,
		})
		_ = pw.Close() // CloseWithError is not needed: Parse sees EOF either way
	}()
	run.outcome.Completion, run.outcome.Err = r.Parse(ctx, pr, func(e executor.Event) error {
		run.outcome.Events = append(run.outcome.Events, e)
		return nil
	})
	_, _ = io.Copy(io.Discard, pr)
	<-done
	run.stderr = stderr.String()
	return run
}

// TestEndToEndInContainer runs the runner's real invocation in a real
// sandbox container with a stand-in cursor-agent (the real CLI needs
// Cursor's service) and checks that the completion, the events and the
// workspace files come out as the conformance suite requires of Claude.
func TestEndToEndInContainer(t *testing.T) {
	img := testenv.RequireImage(t)
	standin := buildStandin(t)
	e, err := docker.New(context.Background(), docker.Options{
		DataDir: t.TempDir(), Image: img,
		ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	spec := executor.Spec{
		UserID: "u1", AssistantID: "cursor-e2e", MemoryBytes: 256 << 20, CPUs: 1, PidsLimit: 128,
		Timeout: 2 * time.Minute, LeaseWait: 30 * time.Second, Network: "none",
	}
	req := executor.RunRequest{
		Messages: []executor.Message{
			{Role: "user", Content: "Hi"},
			{Role: "assistant", Content: "Hello."},
			{Role: "user", Content: "Create hello.txt containing 'hello world' and print it with cat."},
		},
		SystemPrompt: "Keep answers short.",
		Model:        "sonnet-4.5",
		Workdir:      executor.ContainerWorkdir,
		Home:         "/home/agent",
		APIKey:       "key_e2e_not_real",
		MCPConfig:    []byte(`{"mcpServers":{"demo":{"command":"agentbox-helper","args":["mcp","demo"]}}}`),
	}

	t.Run("write and run", func(t *testing.T) {
		spec := spec
		spec.ChatID = "write"
		sb, err := e.Create(context.Background(), spec)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sb.Close(context.Background()) })

		run := runInSandbox(t, sb, standin, "testdata/c_write_and_shell.jsonl", req)
		require.NoError(t, run.execErr, run.stderr)
		require.Equal(t, 0, run.result.ExitCode, "stand-in refused the invocation: %s", run.stderr)
		runnertest.Check(t, runnertest.WriteAndRun, run.outcome)

		// The same transcript parsed on the host gives the same outcome.
		raw, err := os.ReadFile("testdata/c_write_and_shell.jsonl")
		require.NoError(t, err)
		host := runnertest.Parse(cursor.New(), raw)
		assert.Equal(t, host.Completion, run.outcome.Completion)
		assert.Equal(t, host.Shape(), run.outcome.Shape())

		ctx := context.Background()
		got, err := sb.ReadFile(ctx, "hello.txt")
		require.NoError(t, err)
		assert.Equal(t, "hello world\n", string(got), "the file the agent wrote is in the workspace")
		rules, err := sb.ReadFile(ctx, cursor.RulesFile)
		require.NoError(t, err)
		assert.Contains(t, string(rules), "Keep answers short.")
		mcp, err := sb.ReadFile(ctx, cursor.MCPFile)
		require.NoError(t, err)
		assert.JSONEq(t, string(req.MCPConfig), string(mcp))
		for _, f := range [][]byte{rules, mcp, got} {
			assert.NotContains(t, string(f), req.APIKey, "the key never lands in the workspace")
		}
	})

	t.Run("cut before result", func(t *testing.T) {
		spec := spec
		spec.ChatID = "cut"
		sb, err := e.Create(context.Background(), spec)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sb.Close(context.Background()) })

		run := runInSandbox(t, sb, standin, "testdata/f_cut_before_result.jsonl", req)
		require.NoError(t, run.execErr)
		assert.Equal(t, 1, run.result.ExitCode, "the CLI fails without a result")
		runnertest.Check(t, runnertest.CutStream, run.outcome)
		assert.ErrorIs(t, run.outcome.Err, cursor.ErrNoResult)
	})

}
