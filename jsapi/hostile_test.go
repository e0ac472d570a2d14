package jsapi_test

import (
	"context"
	"errors"
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
// within its budget + 100 ms (plus a margin measured in the same run on a
// loaded machine, see hostileWith) with a clear error, and the same Hooks
// must then still serve a healthy request.
const hostileBudget = 500 * time.Millisecond

// backstop is the budget of the cases that a guard (a size check, the heap
// watchdog, a regular expression's own bound) must stop: the error names
// the guard that acted, so the budget is only there to end the test should
// the guard fail, and is long enough that a loaded machine cannot let the
// timer win the race.
const backstop = 60 * time.Second

// hostile runs Create of src once under hostileBudget and checks time,
// error and liveness. It returns the position the error points at.
func hostile(t *testing.T, src string, hc *hooks.Context, wantErr string, wantIs error) (position string) {
	t.Helper()
	return hostileWith(t, hostileRun{opts: jsapi.Options{Timeout: hostileBudget}, hc: hc, wantErr: wantErr, wantIs: wantIs}, src)
}

// hostileRun is how hostileWith runs a hostile script.
type hostileRun struct {
	opts    jsapi.Options // Timeout is the budget
	hc      *hooks.Context
	wantErr string
	wantIs  error
	// mayAbandon allows the invocation to end by abandonment (a built-in
	// still running past the budget + grace); otherwise the script itself
	// must have stopped.
	mayAbandon bool
	// step is the longest built-in call the script makes (one regexp
	// match), which no interrupt can stop, as measured in the same run:
	// the overshoot allowed grows by two of them.
	step time.Duration
}

// hostileWith runs Create of src and checks that it ends with the
// expected error (which names what stopped it), within the budget + 100 ms
// plus a margin measured in the same run when the budget stopped it, that
// the script itself stopped (no abandoned goroutine) unless allowed, and
// that the same Hooks then still serve a healthy request with nothing of
// the hostile run left in it.
func hostileWith(t *testing.T, r hostileRun, src string) (position string) {
	t.Helper()
	healthy := "\nfunction Next(ctx) { return { content: 'alive:' + ({}).polluted + ':' + typeof Array.prototype.evil } }"
	// The machine's pace, measured now: one healthy invocation (a fresh
	// runtime, the guards, a call) of the same script. On a loaded
	// machine (CPU hogs, the whole suite under -race on 2 cores) it takes
	// tens of times longer than on an idle one, and so do the guards'
	// checks and the interrupt's delivery. The budget is raised to 8 such
	// invocations when it is shorter, so that setup alone cannot use it
	// up. The overshoot allowed past the budget is 100 ms plus 2 paces
	// plus twice the worst scheduling lag seen while the hostile hook ran
	// (see lagProbe): bounds derived from baselines of the same run.
	h, err := jsapi.Compile("src/index.js", []byte(src+healthy), r.opts)
	require.NoError(t, err)
	t0 := time.Now()
	_, err = h.Next(context.Background(), &hooks.Context{}, hooks.NextPayload{})
	require.NoError(t, err)
	pace := time.Since(t0)
	if 8*pace > r.opts.Timeout {
		// The error names the budget: the raised one.
		r.wantErr = strings.ReplaceAll(r.wantErr, "budget of "+r.opts.Timeout.String(), "budget of "+(8*pace).String())
		r.opts.Timeout = 8 * pace
		h, err = jsapi.Compile("src/index.js", []byte(src+healthy), r.opts)
		require.NoError(t, err)
	}
	hc := r.hc
	if hc == nil {
		hc = &hooks.Context{}
	}
	probe := startLagProbe()
	start := time.Now()
	_, err = h.Create(context.Background(), hc, nil)
	elapsed := time.Since(start)
	// stopped is when the script itself stopped: when Create returned,
	// or, when the caller stopped waiting for it at the budget + grace
	// (abandoned), when its goroutine finished.
	stopped := elapsed
	if err != nil && strings.Contains(err.Error(), "abandoned") {
		for jsapi.Runaway(h) > 0 && time.Since(start) < r.opts.Timeout+time.Minute {
			time.Sleep(time.Millisecond)
		}
		stopped = time.Since(start)
	}
	slack, lag := overshoot(probe, pace)
	slack += 2 * r.step
	t.Logf("pace %v, worst lag %v, step %v: budget %v, overshoot allowed %v; ended after %v, script stopped after %v: %v",
		pace, lag, r.step, r.opts.Timeout, slack, elapsed, stopped, err)
	require.Error(t, err)
	// What stopped the hook is asserted by its error (wantErr names the
	// guard, the heap watchdog or the budget). When the budget stopped it,
	// it must also have stopped on time: within the budget + 100 ms. A
	// guard's stop needs no clock: had the guard not acted, the budget
	// would have, and the error would say so.
	if errors.Is(err, executor.ErrTimeout) {
		assert.Less(t, elapsed-r.opts.Timeout, slack, "the hook must end within its budget + 100 ms + 2 paces + 2 worst lags")
	}
	assert.ErrorContains(t, err, r.wantErr)
	if r.wantIs != nil {
		assert.ErrorIs(t, err, r.wantIs)
	}
	if !r.mayAbandon && errors.Is(err, executor.ErrTimeout) {
		// The interrupt must stop the script itself (no built-in call
		// running on): on a loaded machine its goroutine may be scheduled
		// after the caller stopped waiting, so this is asserted by when
		// the script stopped, with the same margin.
		assert.Less(t, stopped-r.opts.Timeout, slack, "the script must stop at the interrupt, not be left running")
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
	// The cap, not the budget, must stop both runs: the budget is only
	// the backstop (1000 calls take over 500 ms on a loaded machine).
	hostileWith(t, hostileRun{opts: jsapi.Options{Timeout: backstop}, hc: &hooks.Context{Sandbox: sb},
		wantErr: "more than 1000 ctx.sandbox calls in one Create invocation (max_sandbox_calls)"},
		`function Create(ctx) { for (let i = 0; i < 10000; i++) ctx.sandbox.Exec(["true"]) }`)
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

// TestStuckSandboxCallIsNamed: a sandbox call that outlives the budget
// (a backend that does not heed the cancellation at once) is abandoned,
// and the error says which call and command it was stuck in, so that the
// hook's author or the operator knows where the time went.
func TestStuckSandboxCallIsNamed(t *testing.T) {
	sb := executortest.NewSandbox(t)
	release := make(chan struct{})
	defer close(release)
	sb.ExecFunc = func(ctx context.Context, _ *executor.Cmd) (executor.ExecResult, error) {
		<-release // deaf to ctx
		return executor.ExecResult{}, nil
	}
	h, err := jsapi.Compile("src/index.js", []byte(`function Next(ctx) { ctx.sandbox.ReadFile("a.txt"); ctx.sandbox.Exec(["git", "add", "."]) }`),
		jsapi.Options{Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, sb.WriteFile(context.Background(), "a.txt", []byte("a")))
	_, err = h.Next(context.Background(), &hooks.Context{Sandbox: sb}, hooks.NextPayload{})
	require.ErrorIs(t, err, executor.ErrTimeout)
	assert.Contains(t, err.Error(), `it was stuck in ctx.sandbox.Exec("git add .") (running for `)
}

// TestHostileGoErrorsStayOutOfReach: the Error a failed ctx.sandbox call
// throws carries no Go value (goja's GoError would expose the Go error as
// e.value, with its methods and exported fields), and a script that
// forges or rigs such an Error cannot change the error the gateway sees.
func TestHostileGoErrorsStayOutOfReach(t *testing.T) {
	sb := executortest.NewSandbox(t)
	cases := map[string]struct {
		body, wantErr string
		wantIs        error
	}{
		"no Go value on the error": {
			body:    `try { ctx.sandbox.ReadFile("nope.txt") } catch (e) { throw new Error("own: " + Object.getOwnPropertyNames(e).sort().join(",") + " value: " + typeof e.value) }`,
			wantErr: "own: message,stack value: undefined",
		},
		"rigged value getter is never run": {
			body:    `try { ctx.sandbox.ReadFile("nope.txt") } catch (e) { Object.defineProperty(e, "value", { get() { for (;;) {} } }); throw e }`,
			wantErr: "ctx.sandbox.ReadFile", wantIs: executor.ErrNotFound,
		},
		"forged Go error": {
			body: `let proto; try { ctx.sandbox.ReadFile("nope.txt") } catch (e) { proto = Object.getPrototypeOf(e) }
const f = Object.create(proto, { message: { value: "forged" }, value: { get() { for (;;) {} } } });
throw f`,
			wantErr: "threw a non-Error value (Object)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hostileWith(t, hostileRun{opts: jsapi.Options{Timeout: hostileBudget}, hc: &hooks.Context{Sandbox: sb}, wantErr: tc.wantErr, wantIs: tc.wantIs},
				"function Create(ctx) { "+tc.body+" }")
		})
	}
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
	cases := map[string]struct {
		body, want string
		// heap is Options.MaxHeapGrowth for the cases the heap watchdog
		// must stop (allocation in a script loop, no single big step).
		// The interrupt lands between instructions, after the step in
		// progress: under -race a concatenation copies about 20 MiB a
		// second on an idle 2-core machine (traced: doubling to 16 MiB took
		// 1 s, to 32 MiB 1.5 s more), so the heap cases are watched at
		// 8 MiB, where the step in progress is small and a script loop
		// reaches the limit within a second.
		heap uint64
	}{
		"repeat 2^31":           {body: `return "x".repeat(2 ** 31)`, want: "String.prototype.repeat would build a string of 2147483648 characters"},
		"padStart":              {body: `return "x".padStart(2 ** 30)`, want: "String.prototype.padStart would build"},
		"padEnd":                {body: `return "x".padEnd(2 ** 30, "ab")`, want: "String.prototype.padEnd would build"},
		"replaceAll blow-up":    {body: `const s = "x".repeat(1e6); return s.replaceAll("x", s)`, want: "String.prototype.replaceAll would build"},
		"replace $' blow-up":    {body: `return "x".repeat(1e5).replace(/x/g, "$'")`, want: "String.prototype.replace would build"},
		"join of a huge array":  {body: `return new Array(2 ** 32 - 1).join("x")`, want: "Array.prototype.join over 4294967295 elements"},
		"join of huge strings":  {body: `const s = "x".repeat(1 << 20); return new Array(1000).fill(s).join("")`, want: "Array.prototype.join would build"},
		"fill a huge array":     {body: `return new Array(2 ** 30).fill(0)`, want: "Array.prototype.fill over 1073741824 elements"},
		"Array.from array-like": {body: `return Array.from({ length: 2 ** 30 })`, want: "Array.from over 1073741824 elements"},
		"indexOf on array-like": {body: `return Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)`, want: "Array.prototype.indexOf over"},
		"typed array":           {body: `return new Uint8Array(2 ** 31)`, want: "Uint8Array of 2147483648 bytes"},
		"typed array via ctor":  {body: `return new (new Float64Array(1).constructor)(2 ** 28)`, want: "Float64Array of 2147483648 bytes"},
		"ArrayBuffer":           {body: `return new ArrayBuffer(2 ** 31)`, want: "ArrayBuffer of 2147483648 bytes"},
		"apply with huge args":  {body: `return Math.max.apply(null, { length: 2 ** 30 })`, want: "Function.prototype.apply with 1073741824 arguments"},
		"string doubling":       {body: `let s = "x"; for (;;) s += s`, want: "allocated more than 8 MiB (max_hook_memory)", heap: 8 << 20},
		"array push loop":       {body: `const a = []; for (;;) a.push([1, 2, 3, 4, 5, 6, 7, 8])`, want: "allocated more than 8 MiB (max_hook_memory)", heap: 8 << 20},
		"object growth":         {body: `const o = {}; for (let i = 0; ; i++) o["k" + i] = "v" + i`, want: "allocated more than 8 MiB (max_hook_memory)", heap: 8 << 20},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// The heap watchdog measures the process heap: collect the
			// previous case's garbage (up to GiBs) first, so that its
			// sweep during this case cannot hide this case's growth.
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			// A guard or the heap watchdog must stop each of these, and
			// want names the one that acted; the budget is only the
			// backstop. The heap cases must also carry ErrHeapLimit.
			r := hostileRun{opts: jsapi.Options{Timeout: backstop, MaxHeapGrowth: tc.heap}, wantErr: tc.want}
			if tc.heap != 0 {
				r.wantIs = jsapi.ErrHeapLimit
			}
			hostileWith(t, r, "function Create() { "+tc.body+" }")
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			t.Logf("heap in use before %d MiB, after GC %d MiB", before.HeapInuse>>20, after.HeapInuse>>20)
		})
	}
}

// TestHostileCatastrophicRegex: goja runs backreferences and lookaround
// on regexp2, a backtracking matcher that Interrupt cannot stop, so one
// match is bounded by regexp2's match timeout (it then reports no match);
// RE2-compatible patterns run on Go's linear-time regexp.
func TestHostileCatastrophicRegex(t *testing.T) {
	single := map[string]string{
		"backreference": `/^(a+)+\1$/.test("a".repeat(40) + "b")`,
		"lookahead":     `/^(?=(a+)+$)a*b/.test("a".repeat(40) + "c")`,
		"match":         `"a".repeat(40).match(/^(a+)+\1b/)`,
		"split":         `"a".repeat(40).split(/(a+)+\1b/).length > 1`,
		"linear":        `/^(a+)+$/.test("a".repeat(1e5) + "b")`,
	}
	for name, expr := range single {
		t.Run("one match/"+name, func(t *testing.T) {
			// 2^40 steps (2^100000 for linear, were it backtracking)
			// would never end: the match gives up (no match), or runs in
			// linear time, and the hook goes on to throw; the budget is
			// only the backstop.
			hostileWith(t, hostileRun{opts: jsapi.Options{Timeout: backstop}, wantErr: "matched: false"},
				"function Create() { throw new Error(\"matched: \" + Boolean("+expr+")) }")
		})
	}
	loops := map[string]string{
		"backreference": `/^(a+)+\1$/.test("a".repeat(40) + "b")`,
		"lookahead":     `/^(?=(a+)+$)a*b/.test("a".repeat(40) + "c")`,
		"linear":        `/^(a+)+$/.test("a".repeat(5000) + "b")`,
	}
	for name, match := range loops {
		t.Run("in a loop/"+name, func(t *testing.T) {
			// The budget's interrupt may land inside a match, which runs
			// on until it ends: a backtracking one until its own timeout
			// (the caller stops waiting at the budget + 50 ms and the
			// match ends shortly after), a linear one after its time,
			// which -race and a loaded machine stretch.
			r := hostileRun{opts: jsapi.Options{Timeout: hostileBudget}, wantErr: "time budget of 500ms", wantIs: executor.ErrTimeout,
				mayAbandon: name != "linear"}
			if name == "linear" {
				r.step = matchTime(t, match)
			}
			hostileWith(t, r, "function Create() { for (;;) "+match+" }")
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
	probe := startLagProbe()
	start := time.Now()
	_, err = h.Create(context.Background(), &hooks.Context{}, nil)
	elapsed := time.Since(start)
	slack, lag := overshoot(probe, 0)
	t.Logf("worst lag %v, overshoot allowed %v; ended after %v: %v", lag, slack, elapsed, err)
	require.Error(t, err)
	// The budget stopped it, and the caller stopped waiting at the budget
	// + the grace even when the native call ran on (abandoned): a bound
	// with a margin measured in the same run.
	assert.ErrorIs(t, err, executor.ErrTimeout)
	assert.Less(t, elapsed-hostileBudget, slack)
}

// matchTime is the longest of three runs of a hook that makes the one
// call expr and returns: what one uninterruptible built-in call takes on
// this machine now (its runtime's set-up included).
func matchTime(t *testing.T, expr string) time.Duration {
	t.Helper()
	h, err := jsapi.Compile("src/index.js", []byte("function Create() { "+expr+"; throw new Error('one call') }"), jsapi.Options{Timeout: backstop})
	require.NoError(t, err)
	var worst time.Duration
	for range 3 {
		t0 := time.Now()
		_, err := h.Create(context.Background(), &hooks.Context{}, nil)
		require.ErrorContains(t, err, "one call")
		worst = max(worst, time.Since(t0))
	}
	return worst
}
