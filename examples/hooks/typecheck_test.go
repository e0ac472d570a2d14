package examplehooks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// tsc type-checks files against jsapi/sandbox.d.ts with the TypeScript
// compiler from testdata/tsc, as a hook author would, and returns its
// output.
func tsc(t *testing.T, strict bool, files ...string) (string, error) {
	t.Helper()
	dir := testenv.NodePackage(t, "tsc", filepath.Join("testdata", "tsc"))
	decl, err := filepath.Abs(filepath.Join("..", "..", "jsapi", "sandbox.d.ts"))
	require.NoError(t, err)
	args := []string{filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"),
		"--noEmit", "--target", "es2017", "--lib", "es2020", "--pretty", "false"}
	if strict {
		args = append(args, "--strict")
	}
	args = append(args, decl)
	for _, f := range files {
		abs, err := filepath.Abs(f)
		require.NoError(t, err)
		args = append(args, abs)
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = t.TempDir() // no tsconfig.json or node_modules/@types around
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSandboxDeclarationsTypeCheck: with jsapi/sandbox.d.ts, tsc --strict
// accepts the typed hooks (typed/src/index.ts), plain tsc accepts the
// seed's untyped ones (their parameters are any, but log and the other
// globals must be declared), and tsc --strict rejects the mistakes the
// declarations exist to catch.
func TestSandboxDeclarationsTypeCheck(t *testing.T) {
	t.Run("typed example", func(t *testing.T) {
		out, err := tsc(t, true, filepath.Join("typed", "src", "index.ts"))
		assert.NoError(t, err, out)
	})
	t.Run("seed examples", func(t *testing.T) {
		out, err := tsc(t, false, filepath.Join("coder", "src", "index.ts"))
		assert.NoError(t, err, out)
	})
	mistakes := map[string]struct{ src, want string }{
		"Exec takes an argv array": {`function Create(ctx: Ctx) { ctx.sandbox!.Exec("ls -la") }`, "error TS2345"},
		"sandbox may be null":      {`function Create(ctx: Ctx) { ctx.sandbox.ReadFile("a") }`, "'ctx.sandbox' is possibly 'null'"},
		"misspelt method":          {`function Create(ctx: Ctx) { ctx.sandbox!.Readfile("a") }`, "Property 'Readfile' does not exist on type 'Sandbox'"},
		"unknown Exec option":      {`function Create(ctx: Ctx) { ctx.sandbox!.Exec(["pwd"], { cwd: "src" }) }`, "'cwd' does not exist in type 'ExecOptions'"},
		"Next returns content":     {`function Next(ctx: Ctx, p: NextPayload): NextResult { return { text: "x" } }`, "'text' does not exist"},
		"ListDir entries":          {`function Create(ctx: Ctx) { ctx.sandbox!.ListDir(".").map((f) => f.isDir) }`, "Property 'isDir' does not exist on type 'FileInfo'"},
		"no require":               {`function Create(ctx: Ctx) { require("fs") }`, "Cannot find name 'require'"},
		"memory has no Clear":      {`function Create(ctx: Ctx) { ctx.memory.chat.Clear() }`, "Property 'Clear' does not exist on type 'Store'"},
	}
	// One tsc run for all of them (tsc takes a second to start): each
	// mistake is a module of its own, and must get its own error.
	dir := t.TempDir()
	var files []string
	for name, tc := range mistakes {
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".ts")
		require.NoError(t, os.WriteFile(f, []byte(tc.src+"\nexport {};\n"), 0o644))
		files = append(files, f)
	}
	out, err := tsc(t, true, files...)
	require.Error(t, err, "tsc accepted every mistake")
	errs := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		file, msg, ok := strings.Cut(line, "(")
		if ok {
			errs[filepath.Base(file)] = append(errs[filepath.Base(file)], msg)
		}
	}
	for name, tc := range mistakes {
		got := strings.Join(errs[strings.ReplaceAll(name, " ", "-")+".ts"], "\n")
		assert.Contains(t, got, tc.want, "%s: tsc must reject %s", name, tc.src)
	}
}
