package helper

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// bareImage is a root filesystem of nothing but a static busybox (no
// /etc/passwd, no /workspace, no /run), imported offline.
const bareImage = "agentbox-test/bare-busybox:1"

func requireBareImage(t *testing.T) string {
	t.Helper()
	testenv.RequireDocker(t)
	if exec.Command("docker", "image", "inspect", bareImage).Run() == nil {
		return bareImage
	}
	bb, err := exec.LookPath("busybox")
	require.NoError(t, err, "a static busybox is needed: apt-get install busybox-static")
	bin, err := os.ReadFile(bb)
	require.NoError(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}))
	_, err = tw.Write(bin)
	require.NoError(t, err)
	for _, applet := range []string{"sh", "echo", "id", "ps", "sleep", "cat", "true"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}))
	}
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}))
	require.NoError(t, tw.Close())
	cmd := exec.Command("docker", "import", "-c", "ENV PATH=/bin", "-", bareImage)
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docker import: %s", out)
	return bareImage
}

// TestDockerBareBusybox: the helper runs as the main process of an image
// that holds only a static busybox, as an unnamed uid.
func TestDockerBareBusybox(t *testing.T) {
	image := requireBareImage(t)
	hostDir, work := sandboxDirs(t)
	for _, d := range []string{hostDir, work} {
		require.NoError(t, os.Chown(d, 4242, 4242))
	}
	argv := ServeArgs(helperInImage, ServeOptions{Deadline: time.Now().Add(time.Minute)})
	args := []string{"run", "-d", "--rm", "--init", "--network", "none", "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--user", "4242:4242", "--log-driver", "none",
		"--label", "io.agentbox.test=helper",
		"--mount", "type=bind,src=" + hostDir + ",dst=" + ContainerDir,
		"--mount", "type=bind,src=" + work + ",dst=/workspace",
		"--mount", "type=bind,src=" + testenv.HelperBinary(t) + ",dst=" + helperInImage + ",readonly",
		"--entrypoint", argv[0], image}
	out, err := exec.Command("docker", append(args, argv[1:]...)...).CombinedOutput()
	require.NoError(t, err, "docker run: %s", out)
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
	c, err := WaitReady(ctxTimeout(t, 20*time.Second), hostDir)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	var stdout bytes.Buffer
	res, err := c.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "id -u; pwd"}, Stdout: &stdout})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "4242\n/workspace\n", stdout.String())
}
