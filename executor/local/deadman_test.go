package local_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// deadmanEnv makes the test binary the child gateway of TestGatewayDeath.
const deadmanEnv = "AGENTBOX_LOCAL_DEADMAN_DIR"

// TestGatewayDeath: when the gateway is killed (SIGKILL, no Close), its
// sandboxes die with it, escapees of the command's group included.
func TestGatewayDeath(t *testing.T) {
	if dir := os.Getenv(deadmanEnv); dir != "" {
		deadmanChild(t, dir)
		return
	}
	requireBwrap(t)
	testenv.RequireRoot(t, "mapping the sandbox to uid 100000")
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestGatewayDeath$")
	child.Env = append(os.Environ(), deadmanEnv+"="+dir, "AGENTBOX_HELPER_FOR_CHILD="+testenv.HelperBinary(t))
	require.NoError(t, child.Start())
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	pidFile := filepath.Join(dir, "init.pid")
	require.Eventually(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, 2*time.Minute, 50*time.Millisecond, "the child's sandbox starts")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	initPID := atoi(strings.TrimSpace(string(b)))
	require.NotEmpty(t, hostPIDsOf(t, "sleep 5151", 100000), "the escapee runs")

	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	assert.Eventually(t, func() bool { return processGone(initPID) && len(hostPIDsOf(t, "sleep 5151", 100000)) == 0 },
		30*time.Second, 100*time.Millisecond, "the sandbox dies with its gateway")
}

// deadmanChild starts a sandbox with an escaped process, writes the
// sandbox's init pid and waits to be killed.
func deadmanChild(t *testing.T, dir string) {
	e, err := local.New(context.Background(), local.Options{DataDir: filepath.Join(dir, "data"), HelperBinary: os.Getenv("AGENTBOX_HELPER_FOR_CHILD"), Commands: []string{}})
	require.NoError(t, err)
	sbi, err := e.Create(context.Background(), testSpec("deadman"))
	require.NoError(t, err)
	sb := sbi.(*local.Sandbox)
	_, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "setsid sleep 5151 >/dev/null 2>&1 </dev/null & sleep 0.3"}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "init.pid"), []byte(itoa(sb.PID())), 0o644))
	time.Sleep(5 * time.Minute)
}
