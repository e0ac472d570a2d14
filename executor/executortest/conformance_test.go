package executortest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
)

// TestFakeConformance runs the provider suite against FakeExecutor, whose
// sandboxes run commands on the host through HostExec.
func TestFakeConformance(t *testing.T) {
	executortest.RunConformance(t, func(t *testing.T) executor.Executor {
		e := executortest.NewExecutor(t)
		e.OnCreate = func(sb *executortest.FakeSandbox) { sb.ExecFunc = sb.HostExec }
		return e
	}, executor.Spec{})
}

// leaselessExecutor is broken on purpose: each Create uses a new
// FakeExecutor over the same data directory, so chats are never leased.
type leaselessExecutor struct{ dataDir string }

func (l leaselessExecutor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	e := &executortest.FakeExecutor{DataDir: l.dataDir}
	e.OnCreate = func(sb *executortest.FakeSandbox) { sb.ExecFunc = sb.HostExec }
	return e.Create(ctx, spec)
}

func (leaselessExecutor) Close() error { return nil }

func (leaselessExecutor) Capabilities() executor.Capabilities { return executortest.FakeCapabilities() }

// TestConformanceCatchesBrokenExecutor shows that the suite can fail: run
// against an executor without leases, LeaseBusy fails and the rest pass.
func TestConformanceCatchesBrokenExecutor(t *testing.T) {
	if os.Getenv("EXECUTORTEST_BROKEN") == "1" {
		executortest.RunConformance(t, func(t *testing.T) executor.Executor {
			return leaselessExecutor{dataDir: t.TempDir()}
		}, executor.Spec{})
		return
	}
	if testing.Short() {
		t.Skip("runs the suite in a subprocess")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConformanceCatchesBrokenExecutor$", "-test.v")
	cmd.Env = append(os.Environ(), "EXECUTORTEST_BROKEN=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite must fail against a broken executor:\n%s", out)
	assert.Contains(t, string(out), "--- FAIL: TestConformanceCatchesBrokenExecutor/LeaseBusy")
	assert.Contains(t, string(out), "--- PASS: TestConformanceCatchesBrokenExecutor/WorkspaceSurvivesClose")
	assert.Equal(t, 1, strings.Count(string(out), "    --- FAIL:"), "only LeaseBusy fails:\n%s", out)
}
