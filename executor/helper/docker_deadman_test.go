package helper

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// deadmanChildEnv makes the test binary act as a gateway that starts a
// sandbox with a 5 s deadline, writes the container id to the named file
// and then hangs until it is killed.
const deadmanChildEnv = "AGENTBOX_HELPER_DEADMAN_CHILD"

func TestMain(m *testing.M) {
	if out := os.Getenv(deadmanChildEnv); out != "" {
		os.Exit(deadmanChild(out))
	}
	os.Exit(m.Run())
}

// deadmanChild runs in the child process (no testing.T there).
func deadmanChild(out string) int {
	hostDir, work, bin, image := os.Getenv("SB_HOSTDIR"), os.Getenv("SB_WORK"), os.Getenv("SB_BIN"), os.Getenv("SB_IMAGE")
	argv := ServeArgs(helperInImage, ServeOptions{Deadline: time.Now().Add(5 * time.Second)})
	args := []string{"run", "-d", "--rm", "--init", "--network", "none", "--read-only", "--user", "1000:1000",
		"--log-driver", "none", "--label", "io.agentbox.test=helper",
		"--mount", "type=bind,src=" + hostDir + ",dst=" + ContainerDir,
		"--mount", "type=bind,src=" + work + ",dst=/workspace",
		"--mount", "type=bind,src=" + bin + ",dst=" + helperInImage + ",readonly",
		"--entrypoint", argv[0], image}
	b, err := exec.Command("docker", append(args, argv[1:]...)...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "docker run: %v: %s\n", err, b)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := WaitReady(ctx, hostDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A command in flight when the gateway dies.
	go func() { _, _ = c.Exec(context.Background(), &executor.Cmd{Args: []string{"sleep", "1000"}}) }()
	if err := os.WriteFile(out, bytes.TrimSpace(b), 0o600); err != nil {
		return 1
	}
	select {} // until SIGKILL
}

// TestDockerDeadmanAfterHostKill: the process that started the sandbox (5 s
// deadline) is killed with SIGKILL; the helper still kills its commands and
// exits at the deadline, and the container (AutoRemove) is gone within the
// deadline plus a stop grace.
func TestDockerDeadmanAfterHostKill(t *testing.T) {
	image := testenv.RequireImage(t)
	hostDir, work := sandboxDirs(t)
	idFile := filepath.Join(t.TempDir(), "id")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), deadmanChildEnv+"="+idFile, "SB_HOSTDIR="+hostDir, "SB_WORK="+work,
		"SB_BIN="+testenv.HelperBinary(t), "SB_IMAGE="+image)
	stderrPath := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(stderrPath)
	require.NoError(t, err)
	defer func() { _ = stderr.Close() }()
	child.Stderr = stderr
	start := time.Now()
	require.NoError(t, child.Start())
	var id string
	for id == "" {
		b, _ := os.ReadFile(idFile)
		id = string(b)
		if id == "" {
			require.Less(t, time.Since(start), 30*time.Second, "child never started the sandbox: %s", readFile(stderrPath))
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	killedAt := time.Now()
	require.True(t, containerExists(id), "the container must outlive the killed gateway until its deadline")

	const deadline, stopGrace = 5 * time.Second, 3 * time.Second
	for containerExists(id) {
		require.Less(t, time.Since(start), deadline+stopGrace+2*time.Second, "container %s still there", id)
		time.Sleep(50 * time.Millisecond)
	}
	gone := time.Since(start)
	t.Logf("gateway killed %s after start; container gone %s after start (deadline 5s, counted from before docker run)", killedAt.Sub(start), gone)
	assert.Less(t, gone, deadline+stopGrace)
}

func containerExists(id string) bool {
	return exec.Command("docker", "inspect", "--format", "{{.State.Status}}", id).Run() == nil
}

// TestDockerStream100MiBBoundedHeap: 100 MiB of output streamed through
// the helper; the host's heap stays bounded (sampled while streaming).
func TestDockerStream100MiBBoundedHeap(t *testing.T) {
	sb := startSandbox(t, sandboxOpts{})
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	const size = 100 << 20
	var n countingWriter
	start := time.Now()
	res, err := sb.client.Exec(context.Background(), &executor.Cmd{
		Args:      []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero", size)},
		Stdout:    &n,
		MaxOutput: 200 << 20,
	})
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	assert.Equal(t, int64(size), int64(n))
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	grow := int64(peak.Load()) - int64(m0.HeapInuse)
	t.Logf("100 MiB in %s (%.0f MiB/s); heap in use %d KiB before, peak %d KiB (+%d KiB); allocated %d KiB during the stream",
		elapsed, 100/elapsed.Seconds(), m0.HeapInuse>>10, peak.Load()>>10, grow>>10, (m1.TotalAlloc-m0.TotalAlloc)>>10)
	assert.Less(t, grow, int64(8<<20), "heap growth while streaming 100 MiB")
	assert.Less(t, m1.TotalAlloc-m0.TotalAlloc, uint64(8<<20), "allocation does not scale with the output")
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
