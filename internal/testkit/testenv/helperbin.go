package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// helperPkg is the main package of the in-container helper.
const helperPkg = "github.com/agentbox/agentbox/executor/helper/cmd/agentbox-helper"

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
)

// HelperBinary builds the static linux/amd64 agentbox-helper once per test
// process and returns its path, for tests that bind-mount it into a
// container. Builds are cached under os.UserCacheDir()/agentbox/helper,
// keyed by a hash of the Go version and the helper's sources, so an
// unchanged helper is not rebuilt. A build failure fails the test.
func HelperBinary(t testing.TB) string {
	t.Helper()
	helperOnce.Do(func() { helperPath, helperErr = buildHelper() })
	if helperErr != nil {
		t.Fatalf("build agentbox-helper: %v", helperErr)
	}
	return helperPath
}

func buildHelper() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", err
	}
	root := strings.TrimSpace(string(out))
	key, err := helperSourceHash(root)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "agentbox", "helper")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "agentbox-helper-"+key[:16])
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(tmp, "agentbox-helper"), helperPkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{out: string(b), err: err}
	}
	if err := os.Chmod(filepath.Join(tmp, "agentbox-helper"), 0o755); err != nil {
		return "", err
	}
	// Rename is atomic: parallel test processes never see a partial binary.
	if err := os.Rename(filepath.Join(tmp, "agentbox-helper"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }
func (e *buildError) Unwrap() error { return e.err }

// helperSourceHash hashes what the helper binary is built from: the Go
// version, go.mod/go.sum and the non-test Go files of executor (the helper
// imports only executor and stdlib).
func helperSourceHash(root string) (string, error) {
	h := sha256.New()
	_, _ = io.WriteString(h, runtime.Version())
	files := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	err := filepath.WalkDir(filepath.Join(root, "executor"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		_, _ = io.WriteString(h, f)
		_, _ = h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
