package helper

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// helperInImage is where tests bind-mount the helper (the image has the
// empty directory /opt/agentbox).
const helperInImage = "/opt/agentbox/agentbox-helper"

// sandbox is a container started with the docker CLI the way executor/docker
// will start it: Init, network none, read-only root, non-root, no caps, the
// per-sandbox directory mounted at /run/agentbox, the helper as main process.
type sandbox struct {
	id      string
	hostDir string
	work    string
	client  *Client
}

type sandboxOpts struct {
	serve  ServeOptions
	extra  []string // more docker run flags
	noWait bool
}

// dockerRunArgs returns the `docker run` argv for a sandbox.
func dockerRunArgs(t testing.TB, image, hostDir, work string, o sandboxOpts) []string {
	bin := testenv.HelperBinary(t)
	argv := ServeArgs(helperInImage, o.serve)
	args := []string{"run", "-d", "--rm", "--init", "--network", "none", "--read-only",
		"--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--user", "1000:1000", "--log-driver", "none", "--pids-limit", "256", "--memory", "512m",
		"--label", "io.agentbox.test=helper",
		"--mount", "type=bind,src=" + hostDir + ",dst=" + ContainerDir,
		"--mount", "type=bind,src=" + work + ",dst=/workspace",
		"--mount", "type=bind,src=" + bin + ",dst=" + helperInImage + ",readonly",
		"--entrypoint", argv[0]}
	args = append(args, o.extra...)
	args = append(args, image)
	return append(args, argv[1:]...)
}

// sandboxDirs makes the per-sandbox and workspace directories, owned by the
// sandbox user, 0700.
func sandboxDirs(t testing.TB) (string, string) {
	root := t.TempDir()
	hostDir, work := filepath.Join(root, "sandbox"), filepath.Join(root, "workspace")
	for _, d := range []string{hostDir, work} {
		require.NoError(t, os.Mkdir(d, 0o700))
		require.NoError(t, os.Chown(d, 1000, 1000))
	}
	return hostDir, work
}

func startSandbox(t testing.TB, o sandboxOpts) *sandbox {
	t.Helper()
	image := testenv.RequireImage(t)
	hostDir, work := sandboxDirs(t)
	out, err := exec.Command("docker", dockerRunArgs(t, image, hostDir, work, o)...).CombinedOutput()
	require.NoError(t, err, "docker run: %s", out)
	sb := &sandbox{id: strings.TrimSpace(string(out)), hostDir: hostDir, work: work}
	t.Cleanup(func() {
		if sb.client != nil {
			_ = sb.client.Close()
		}
		_ = exec.Command("docker", "rm", "-f", sb.id).Run()
	})
	if !o.noWait {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		sb.client, err = WaitReady(ctx, hostDir)
		require.NoError(t, err, "helper not ready; container logs are off (log driver none)")
	}
	return sb
}

// dockerExec runs argv in the sandbox through `docker exec`.
func (s *sandbox) dockerExec(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := exec.Command("docker", append([]string{"exec", s.id}, argv...)...).CombinedOutput()
	require.NoError(t, err, "docker exec %v: %s", argv, out)
	return string(out)
}
