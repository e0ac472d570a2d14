package docker

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// testLogger logs to the test at debug level when AGENTBOX_TEST_LOG is set.
func testLogger(t testing.TB) hclog.Logger {
	if os.Getenv("AGENTBOX_TEST_LOG") == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: os.Stderr})
}

// newTestExecutor starts an Executor on a fresh data dir against the real
// daemon, with the timers off (tests call the reconciler themselves).
func newTestExecutor(t testing.TB, mutate ...func(*Options)) *Executor {
	t.Helper()
	img := testenv.RequireImage(t)
	o := Options{
		DataDir:           t.TempDir(),
		Image:             img,
		Logger:            testLogger(t),
		ReconcileInterval: -1,
		RetentionInterval: -1,
		StopGrace:         500 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&o)
	}
	e, err := New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// testSpec is a small sandbox for chat.
func testSpec(chat string) executor.Spec {
	return executor.Spec{
		UserID: "u1", ChatID: chat, AssistantID: "tester",
		MemoryBytes: 256 << 20, CPUs: 1, PidsLimit: 128,
		Timeout: 2 * time.Minute, LeaseWait: 30 * time.Second,
	}
}

// create makes a sandbox closed at the end of the test.
func create(t testing.TB, e *Executor, spec executor.Spec) *Sandbox {
	t.Helper()
	sb, err := e.Create(context.Background(), spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb.(*Sandbox)
}

// run execs a shell script and returns stdout, stderr and the result.
func run(t testing.TB, sb executor.Sandbox, script string, mod ...func(*executor.Cmd)) (string, string, executor.ExecResult, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := &executor.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb}
	for _, m := range mod {
		m(cmd)
	}
	res, err := sb.Exec(context.Background(), cmd)
	return out.String(), errb.String(), res, err
}

// mustRun execs a shell script that must succeed and returns its stdout.
func mustRun(t testing.TB, sb executor.Sandbox, script string) string {
	t.Helper()
	out, errs, res, err := run(t, sb, script)
	require.NoError(t, err, "script %q: stderr %s", script, errs)
	require.Equal(t, 0, res.ExitCode, "script %q: stderr %s", script, errs)
	return strings.TrimSpace(out)
}
