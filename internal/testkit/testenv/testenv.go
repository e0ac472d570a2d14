// Package testenv holds the preconditions of tests that need real parts
// (a Docker daemon, the sandbox image, the Claude Code CLI). Locally such a
// test skips with a message saying what to install; under CI=true it fails,
// because a test that skips in CI is a test that does not exist.
//
// Concurrency: every function is safe for concurrent use.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultImage is the sandbox image the tests run, built offline by
// `make image` (examples/images/build-offline.sh).
const DefaultImage = "agentbox/sandbox-claude:latest"

// InCI reports whether the tests run under CI (CI=true), where missing real
// parts are failures.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// unavailable skips locally and fails in CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI=true and %s", msg)
	}
	t.Skipf("%s (set CI=true to make this a failure)", msg)
}

// DockerHost returns the unix socket path of the Docker daemon.
func DockerHost() string {
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		return strings.TrimPrefix(h, "unix://")
	}
	return "/var/run/docker.sock"
}

var (
	pingOnce sync.Once
	pingErr  error
)

// dockerGet performs a GET against the daemon's HTTP API over its socket.
func dockerGet(ctx context.Context, path string) (*http.Response, error) {
	sock := DockerHost()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker"+path, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

// RequireDocker skips (locally) or fails (CI) unless a Docker daemon answers.
func RequireDocker(t testing.TB) {
	t.Helper()
	pingOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := dockerGet(ctx, "/_ping")
		if err != nil {
			pingErr = err
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			pingErr = fmt.Errorf("ping answered %s", resp.Status)
		}
	})
	if pingErr != nil {
		unavailable(t, "no Docker daemon answers at %s (%v); install docker.io and start dockerd, or run .ci/setup", DockerHost(), pingErr)
	}
}

// Image returns the sandbox image for tests: $AGENTBOX_TEST_IMAGE or
// DefaultImage.
func Image() string {
	if v := os.Getenv("AGENTBOX_TEST_IMAGE"); v != "" {
		return v
	}
	return DefaultImage
}

// Runtime returns the OCI runtime the end-to-end tests run their sandboxes
// with: $AGENTBOX_TEST_RUNTIME ("" for the daemon's default, runc). A
// named runtime the daemon does not list is unavailable: `make test-runsc`
// runs the end-to-end tests again on gVisor this way.
func Runtime(t testing.TB) string {
	t.Helper()
	rt := os.Getenv("AGENTBOX_TEST_RUNTIME")
	if rt == "" {
		return ""
	}
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dockerGet(ctx, "/info")
	if err != nil {
		unavailable(t, "cannot ask the daemon for its runtimes: %v", err)
		return rt
	}
	defer func() { _ = resp.Body.Close() }()
	var info struct{ Runtimes map[string]json.RawMessage }
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatalf("decode the daemon's /info: %v", err)
	}
	if _, ok := info.Runtimes[rt]; !ok {
		unavailable(t, "AGENTBOX_TEST_RUNTIME=%s but the Docker daemon has no such runtime; for runsc run AGENTBOX_RUNSC=1 .ci/setup", rt)
	}
	return rt
}

// RequireImage requires Docker and the test image, and returns the image.
func RequireImage(t testing.TB) string {
	t.Helper()
	return requireImage(t, Image(), "make image")
}

// DefaultCodexImage is the codex runner's sandbox image, built offline by
// `make image-codex`.
const DefaultCodexImage = "agentbox/sandbox-codex:latest"

// CodexImage returns the codex runner's image for tests:
// $AGENTBOX_TEST_CODEX_IMAGE or DefaultCodexImage (make test-codex-previous
// names the previous pin's).
func CodexImage() string {
	if v := os.Getenv("AGENTBOX_TEST_CODEX_IMAGE"); v != "" {
		return v
	}
	return DefaultCodexImage
}

// RequireCodexImage skips (locally) or fails (CI) unless Docker answers
// and has CodexImage; it returns the image.
func RequireCodexImage(t testing.TB) string {
	t.Helper()
	return requireImage(t, CodexImage(), "make image-codex")
}

// requireImage skips or fails unless Docker has img, which build makes.
func requireImage(t testing.TB, img, build string) string {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dockerGet(ctx, "/images/"+img+"/json")
	if err != nil {
		unavailable(t, "cannot inspect image %s: %v", img, err)
		return img
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		unavailable(t, "the sandbox image %s is missing (%s); build it with `%s`", img, resp.Status, build)
	}
	return img
}

// RequireRoot skips (locally) or fails (CI) unless the test runs as root,
// which chown to the sandbox user and mknod need; why names the need.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "%s needs root (running as uid %d); run the tests as root, as .ci/run does", why, os.Geteuid())
	}
}

// RequireLocalMode skips (locally) or fails (CI) unless the local
// backend can run here: bubblewrap and root; and returns the version the
// host's cli prints for --version (local mode runs the host's CLI).
func RequireLocalMode(t testing.TB, cli string) string {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil || os.Geteuid() != 0 {
		unavailable(t, "local mode cannot run: it needs bubblewrap and root (bwrap: %v, uid %d); .ci/setup installs bubblewrap and the tests run as root", err, os.Geteuid())
	}
	out, err := exec.Command(cli, "--version").Output()
	if err != nil {
		unavailable(t, "the %s CLI is not on the host's PATH (%v): local mode runs the host's CLI; .ci/setup installs it", cli, err)
	}
	return strings.TrimSpace(string(out))
}

// ImageLabel returns a label of a local image ("" when the image has no
// such label), failing the test when the daemon cannot say.
func ImageLabel(t testing.TB, img, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dockerGet(ctx, "/images/"+img+"/json")
	if err != nil {
		t.Fatalf("inspect image %s: %v", img, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var info struct {
		Config struct{ Labels map[string]string }
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("inspect image %s: %s", img, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatalf("inspect image %s: %v", img, err)
	}
	return info.Config.Labels[key]
}

// RequireCluster returns the kubeconfig of the test cluster
// (AGENTBOX_KUBECONFIG, which internal/k8s/test.sh sets). Without one it
// skips, unless CI=true and AGENTBOX_K8S=1 ask for the cluster tests: then
// it fails.
func RequireCluster(t testing.TB) string {
	t.Helper()
	kc := os.Getenv("AGENTBOX_KUBECONFIG")
	if kc != "" {
		return kc
	}
	if InCI() && os.Getenv("AGENTBOX_K8S") == "1" {
		t.Fatal("CI=true, AGENTBOX_K8S=1 and AGENTBOX_KUBECONFIG is unset; run internal/k8s/test.sh (or make k8s-up and export AGENTBOX_KUBECONFIG=/var/lib/agentbox-k8s/admin.kubeconfig)")
	}
	t.Skip("no cluster: AGENTBOX_KUBECONFIG is unset (internal/k8s/test.sh sets it; or make k8s-up and export AGENTBOX_KUBECONFIG=/var/lib/agentbox-k8s/admin.kubeconfig)")
	return ""
}

// WaitPooled waits until the Docker executor on dataDir has a pooled
// container (label io.agentbox.pool) whose helper listens (exec.sock in
// its host dir), plus a second for the executor's own readiness check
// (the helper's hello), and fails t after two minutes.
func WaitPooled(t testing.TB, dataDir string) {
	t.Helper()
	filter := url.QueryEscape(fmt.Sprintf(`{"label":["io.agentbox.pool","io.agentbox.data-dir=%s"]}`, dataDir))
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := dockerGet(ctx, "/containers/json?filters="+filter)
		if err != nil {
			cancel()
			t.Fatalf("list pooled containers: %v", err)
		}
		var list []struct{ Labels map[string]string }
		err = json.NewDecoder(resp.Body).Decode(&list)
		_ = resp.Body.Close()
		cancel()
		if err != nil {
			t.Fatalf("list pooled containers: %v", err)
		}
		for _, c := range list {
			if _, err := os.Stat(filepath.Join(dataDir, "sandboxes", c.Labels["io.agentbox.sandbox"], "exec.sock")); err == nil {
				time.Sleep(time.Second)
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the executor on %s never had a started pooled container", dataDir)
}
