package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files and REFERENCE.md")

// env is a fake environment for LoadOptions.LookupEnv.
func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

// testOptions pin the host limits so goldens do not depend on the machine.
func testOptions() LoadOptions {
	return LoadOptions{
		LookupEnv: env(map[string]string{
			"DEEPSEEK_API_KEY":  "sk-deepseek",
			"ANTHROPIC_API_KEY": "sk-ant",
			"CURSOR_API_KEY":    "cur-key",
			"SEARCH_TOKEN":      "Bearer search",
		}),
		HostCPUs:        4,
		HostMemoryBytes: 8 << 30,
	}
}

// writeTree writes files (slash paths) below a temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

// render prints a Load outcome for golden files.
func render(g *Gateway, err error) string {
	var b strings.Builder
	var problems []Problem
	if err != nil {
		var ce *Error
		if !errors.As(err, &ce) {
			return "unexpected error type: " + err.Error() + "\n"
		}
		b.WriteString("error\n")
		problems = ce.Problems
	} else {
		b.WriteString("loaded\n")
		problems = g.Problems
	}
	for _, p := range problems {
		b.WriteString(p.Error())
		b.WriteString("\n")
	}
	return b.String()
}

// golden compares got with testdata/<name>, rewriting it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", filepath.FromSlash(name))
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./config/... -update")
	assert.Equal(t, string(want), got, "golden %s differs; review and run with -update", path)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
