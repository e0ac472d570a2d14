package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// NodePackage returns a directory holding the npm package of pkgDir
// (package.json and package-lock.json) installed with `npm ci`, plus the
// given script files. The installation is cached in the user cache
// directory, keyed by the lock file's hash and name, so it happens once per
// lock. Without node and npm on PATH the test skips, or fails under CI.
func NodePackage(t testing.TB, name, pkgDir string, scripts ...string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not on PATH; install Node.js 18 or later (with npm)", tool)
		}
	}
	lock, err := os.ReadFile(filepath.Join(pkgDir, "package-lock.json"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "agentbox", "node-"+name+"-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	// Test binaries of several packages run at once: one installs, the
	// others wait for it.
	lockFile, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer func() { _ = lockFile.Close() }()
	if err := syscall.Flock(int(lockFile.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("testenv: lock %s: %v", lockFile.Name(), err)
	}
	files := append([]string{filepath.Join(pkgDir, "package.json"), filepath.Join(pkgDir, "package-lock.json")}, scripts...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644)
		}
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}
