package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	for k, v := range map[string]string{"DEEPSEEK_API_KEY": "sk-ds", "ANTHROPIC_API_KEY": "sk-ant", "CURSOR_API_KEY": "cur", "SEARCH_TOKEN": "tok"} {
		t.Setenv(k, v)
	}
	fixture := filepath.Join("..", "..", "testdata", "gateway")

	var out, errs bytes.Buffer
	code := run([]string{fixture}, &out, &errs)
	assert.Equal(t, 0, code, errs.String())
	assert.Contains(t, out.String(), "ok: 3 assistant(s), 3 connector(s)")
	assert.Contains(t, errs.String(), "skills/misnamed/SKILL.md:2:1: name: skill excluded")

	out.Reset()
	errs.Reset()
	require.Equal(t, 0, run([]string{"-json", fixture}, &out, &errs))
	assert.Contains(t, out.String(), `"max_turns": 20`)
	assert.NotContains(t, out.String(), "sk-ds", "keys are redacted")

	bad := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(bad, "assistants", "x"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bad, "assistants", "x", "package.yao"), []byte(`{"connector": "nope"}`), 0o644))
	errs.Reset()
	assert.Equal(t, 1, run([]string{bad}, &out, &errs))
	assert.Contains(t, errs.String(), `assistants/x/package.yao:1:2: connector: unknown connector "nope"`)
	assert.Contains(t, errs.String(), "1 error(s)")

	assert.Equal(t, 2, run([]string{"a", "b"}, &out, &errs))
}
