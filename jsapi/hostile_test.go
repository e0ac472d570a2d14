package jsapi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// hostileBudget is the hook_timeout of the hostile tests; each must end
// within hostileBudget + 100 ms with a clear error, and the same Hooks must
// then still serve a healthy request.
const hostileBudget = 500 * time.Millisecond

// hostile runs Create of src once and checks time, error and liveness.
// It returns the position the error points at.
func hostile(t *testing.T, src string, hc *hooks.Context, wantErr string, wantIs error) (position string) {
	t.Helper()
	return hostileWithin(t, hostileBudget, src, hc, wantErr, wantIs)
}

// hostileWithin is hostile with another budget.
func hostileWithin(t *testing.T, budget time.Duration, src string, hc *hooks.Context, wantErr string, wantIs error) (position string) {
	t.Helper()
	healthy := "\nfunction Next(ctx) { return { content: 'alive:' + ({}).polluted + ':' + typeof Array.prototype.evil } }"
	h, err := jsapi.Compile("src/index.js", []byte(src+healthy), jsapi.Options{Timeout: budget})
	require.NoError(t, err)
	if hc == nil {
		hc = &hooks.Context{}
	}
	start := time.Now()
	_, err = h.Create(context.Background(), hc, nil)
	elapsed := time.Since(start)
	t.Logf("ended after %v: %v", elapsed, err)
	require.Error(t, err)
	assert.Less(t, elapsed, budget+100*time.Millisecond, "the hook must end within its budget + 100 ms")
	assert.ErrorContains(t, err, wantErr)
	if wantIs != nil {
		assert.ErrorIs(t, err, wantIs)
	}
	res, err := h.Next(context.Background(), &hooks.Context{}, hooks.NextPayload{})
	require.NoError(t, err, "the same hooks must serve the next request")
	assert.Equal(t, "alive:undefined:undefined", res.Content)
	var he *hooks.HookError
	_, err = h.Create(context.Background(), hc, nil)
	require.ErrorAs(t, err, &he)
	return he.Position
}

func TestHostileInfiniteLoop(t *testing.T) {
	pos := hostile(t, "function Create() {\n  for (;;) {}\n}", nil,
		"Create hook ran past its time budget of 500ms; raise hook_timeout", executor.ErrTimeout)
	assert.True(t, strings.HasPrefix(pos, "src/index.js:"), pos)
}

func TestHostileInfiniteLoopInCatchAndFinally(t *testing.T) {
	hostile(t, `function Create() { for (;;) { try { for (;;) {} } catch (e) {} finally { continue } } }`, nil,
		"time budget", executor.ErrTimeout)
}

func TestHostileDeepRecursion(t *testing.T) {
	pos := hostile(t, "function Create() {\n  function f(n) { return f(n + 1) + 1 }\n  return f(0)\n}", nil,
		"call stack deeper than 1000 frames (max_call_stack)", jsapi.ErrStackOverflow)
	assert.True(t, strings.HasPrefix(pos, "src/index.js:2:"), pos)
}

func TestHostileThrowNonError(t *testing.T) {
	cases := map[string]struct{ throw, want string }{
		"string":    {`"plain string"`, "plain string"},
		"number":    {`42`, "threw 42"},
		"null":      {`null`, "threw null; throw new Error"},
		"undefined": {`undefined`, "threw undefined"},
		"object":    {`{code: 7}`, "threw a non-Error value (Object)"},
		"symbol":    {`Symbol("s")`, "threw Symbol(s)"},
		"bigint":    {`10n`, "threw 10"},
		"function":  {`function f() {}`, "threw a non-Error value (Function)"},
		"array":     {`[1, 2]`, "threw a non-Error value (Array)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hostile(t, "function Create() { throw "+tc.throw+" }", nil, tc.want, nil)
		})
	}
}

func TestHostileToStringLoops(t *testing.T) {
	cases := map[string]string{
		"toString loops":       `throw { toString() { for (;;) {} } }`,
		"valueOf loops":        `throw { valueOf() { for (;;) {} }, toString() { for (;;) {} } }`,
		"message getter loops": `const e = new Error("x"); Object.defineProperty(e, "message", { get() { for (;;) {} } }); throw e`,
		"name getter loops":    `const e = new Error("x"); Object.defineProperty(e, "name", { get() { for (;;) {} } }); throw e`,
		"proxy traps loop":     `throw new Proxy(new Error("p"), { get() { for (;;) {} }, getPrototypeOf() { for (;;) {} }, getOwnPropertyDescriptor() { for (;;) {} } })`,
		"toJSON loops in log":  `log.Info("%j", { toJSON() { for (;;) {} } })`,
		"Symbol.toPrimitive":   `throw { [Symbol.toPrimitive]() { for (;;) {} } }`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			hostile(t, "function Create() { "+body+" }", nil, "Create hook:", nil)
		})
	}
}

func TestHostilePrototypePollution(t *testing.T) {
	src := `function Create() {
  Object.prototype.polluted = "yes";
  Array.prototype.evil = function () {};
  JSON.stringify = function () { return "hijacked" };
  Object.getOwnPropertyDescriptor = function () { for (;;) {} };
  String.prototype.repeat = function () { return "unguarded" };
  globalThis.leak = 1;
  throw new Error("polluted");
}`
	hostile(t, src, nil, "polluted", nil)
	// A fresh runtime per invocation: nothing above is visible now (the
	// Next check in hostile asserts it), and the guards are back.
	h, err := jsapi.Compile("src/index.js", []byte(`function Create() { return { messages: [{ role: "user", content: [typeof leak, String(JSON.stringify({a: 1}))].join(" ") }] } }`), jsapi.Options{})
	require.NoError(t, err)
	res, err := h.Create(context.Background(), &hooks.Context{}, nil)
	require.NoError(t, err)
	assert.Equal(t, `undefined {"a":1}`, res.Messages[0].Content)
}

func TestHostileManySandboxCalls(t *testing.T) {
	sb := executortest.NewSandbox(t)
	sb.ExecFunc = func(context.Context, *executor.Cmd) (executor.ExecResult, error) { return executor.ExecResult{}, nil }
	hostile(t, `function Create(ctx) { for (let i = 0; i < 10000; i++) ctx.sandbox.Exec(["true"]) }`,
		&hooks.Context{Sandbox: sb}, "more than 1000 ctx.sandbox calls in one Create invocation (max_sandbox_calls)", nil)
	assert.Len(t, sb.Calls(), 2*jsapi.DefaultMaxSandboxCalls, "two runs of the hook, each stopped at the cap")
}

func TestHostileSlowSandboxCallIsCancelledAtTheBudget(t *testing.T) {
	sb := executortest.NewSandbox(t)
	sb.ExecFunc = func(ctx context.Context, _ *executor.Cmd) (executor.ExecResult, error) {
		<-ctx.Done() // a command that never ends: only the budget stops it
		return executor.ExecResult{}, fmt.Errorf("exec: %w", executor.ErrTimeout)
	}
	hostile(t, `function Create(ctx) { ctx.sandbox.Exec(["sleep", "3600"]) }`, &hooks.Context{Sandbox: sb}, "time budget of 500ms", executor.ErrTimeout)
}

func TestHostileSandboxBytesCap(t *testing.T) {
	sb := executortest.NewSandbox(t)
	h, err := jsapi.Compile("src/index.js", []byte(`function Create(ctx) { const s = "x".repeat(1 << 20); for (let i = 0; i < 100; i++) ctx.sandbox.WriteFile("f" + i, s) }`),
		jsapi.Options{MaxSandboxBytes: 10 << 20})
	require.NoError(t, err)
	_, err = h.Create(context.Background(), &hooks.Context{Sandbox: sb}, nil)
	assert.ErrorContains(t, err, "ctx.sandbox moved more than 10485760 bytes in one Create invocation (max_sandbox_bytes)")
}

func TestHostilePathEscapes(t *testing.T) {
	sb := executortest.NewSandbox(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(sb.Dir(), "link")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(sb.Dir(), "secret-link")))
	src := `function Create(ctx) {
  const attempts = [
    () => ctx.sandbox.ReadFile("../../../../etc/passwd"),
    () => ctx.sandbox.ReadFile("/etc/passwd"),
    () => ctx.sandbox.ReadFile("/workspace/../etc/passwd"),
    () => ctx.sandbox.ReadFile("link/secret"),
    () => ctx.sandbox.ReadFile("secret-link"),
    () => ctx.sandbox.ReadFile("a\u0000b"),
    () => ctx.sandbox.WriteFile("../escaped", "x"),
    () => ctx.sandbox.WriteFile("link/planted", "x"),
    () => ctx.sandbox.ListDir("/"),
    () => ctx.sandbox.ListDir("link"),
    () => ctx.sandbox.Stat("../"),
    () => ctx.sandbox.EditFile("secret-link", [{old: "s", new: "t"}]),
  ];
  const escaped = [];
  for (const a of attempts) {
    try { escaped.push(String(a())) } catch (e) { if (!/escapes the workspace/.test(e.message)) escaped.push("unexpected: " + e.message) }
  }
  if (escaped.length) throw new Error("escaped: " + escaped.join(" | "));
  throw new Error("all refused");
}`
	hostile(t, src, &hooks.Context{Sandbox: sb}, "all refused", nil)
	_, err := os.Stat(filepath.Join(outside, "planted"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	b, err := os.ReadFile(filepath.Join(outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, "s3cret", string(b))
}

func TestHostileHugeAllocation(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"repeat 2^31":           {`return "x".repeat(2 ** 31)`, "String.prototype.repeat would build a string of 2147483648 characters"},
		"padStart":              {`return "x".padStart(2 ** 30)`, "String.prototype.padStart would build"},
		"padEnd":                {`return "x".padEnd(2 ** 30, "ab")`, "String.prototype.padEnd would build"},
		"replaceAll blow-up":    {`const s = "x".repeat(1e6); return s.replaceAll("x", s)`, "String.prototype.replaceAll would build"},
		"replace $' blow-up":    {`return "x".repeat(1e5).replace(/x/g, "$'")`, "String.prototype.replace would build"},
		"join of a huge array":  {`return new Array(2 ** 32 - 1).join("x")`, "Array.prototype.join over 4294967295 elements"},
		"join of huge strings":  {`const s = "x".repeat(1 << 20); return new Array(1000).fill(s).join("")`, "Array.prototype.join would build"},
		"fill a huge array":     {`return new Array(2 ** 30).fill(0)`, "Array.prototype.fill over 1073741824 elements"},
		"Array.from array-like": {`return Array.from({ length: 2 ** 30 })`, "Array.from over 1073741824 elements"},
		"indexOf on array-like": {`return Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)`, "Array.prototype.indexOf over"},
		"typed array":           {`return new Uint8Array(2 ** 31)`, "Uint8Array of 2147483648 bytes"},
		"typed array via ctor":  {`return new (new Float64Array(1).constructor)(2 ** 28)`, "Float64Array of 2147483648 bytes"},
		"ArrayBuffer":           {`return new ArrayBuffer(2 ** 31)`, "ArrayBuffer of 2147483648 bytes"},
		"apply with huge args":  {`return Math.max.apply(null, { length: 2 ** 30 })`, "Function.prototype.apply with 1073741824 arguments"},
		"string doubling":       {`let s = "x"; for (;;) s += s`, "allocated more than 128 MiB (max_hook_memory)"},
		"array push loop":       {`const a = []; for (;;) a.push([1, 2, 3, 4, 5, 6, 7, 8])`, "Create hook"},
		"object growth":         {`const o = {}; for (let i = 0; ; i++) o["k" + i] = "v" + i`, "Create hook"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			// The guards and the heap watchdog must stop these long
			// before the time budget; a budget of 2 s keeps a loaded
			// machine (-race, the whole suite on 2 cores) from letting
			// the timer win the race and hide which guard acted.
			hostileWithin(t, 4*hostileBudget, "function Create() { "+tc.body+" }", nil, tc.want, nil)
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			t.Logf("heap in use before %d MiB, after GC %d MiB", before.HeapInuse>>20, after.HeapInuse>>20)
		})
	}
}

func TestHostileCatastrophicRegex(t *testing.T) {
	cases := map[string]string{
		// Backreferences and lookaround run on regexp2 (backtracking).
		"backreference": `return /^(a+)+\1$/.test("a".repeat(40) + "b")`,
		"lookahead":     `return /^(?=(a+)+$)a*b/.test("a".repeat(40) + "c")`,
		"in a loop":     `for (;;) /^(a|a)*\1$/.test("a".repeat(30) + "b")`,
		// RE2-compatible patterns run on Go's linear-time regexp.
		"nested quantifier (linear)": `for (;;) /^(a+)+$/.test("a".repeat(5000) + "b")`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			// A single match gives up after 100 ms (regexp2 MatchTimeout)
			// and reports no match; the hook then ends at its budget.
			src := "function Create() { const r = (function () { " + body + " })(); for (;;) {} }"
			hostile(t, src, nil, "time budget of 500ms", executor.ErrTimeout)
		})
	}
}

func TestHostileRunawayNativeCallIsAbandoned(t *testing.T) {
	// JSON.stringify of a deep chain is native and quadratic in goja: the
	// script builds it within budget, then the native call overruns.
	h, err := jsapi.Compile("src/index.js", []byte(`function Create() {
  let o = {};
  for (let i = 0; i < 30000; i++) o = { a: o };
  const t0 = Date.now();
  for (;;) JSON.stringify(o);
}`), jsapi.Options{Timeout: hostileBudget, MaxRunaway: 1})
	require.NoError(t, err)
	start := time.Now()
	_, err = h.Create(context.Background(), &hooks.Context{}, nil)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Less(t, elapsed, hostileBudget+100*time.Millisecond)
	assert.ErrorIs(t, err, executor.ErrTimeout)
	t.Logf("ended after %v: %v", elapsed, err)
}
