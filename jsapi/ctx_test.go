package jsapi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
)

func TestSandboxAPI(t *testing.T) {
	runCases(t, map[string]jsCase{
		"workdir": {body: `return ctx.sandbox.workdir`, want: `"/workspace"`},
		"sandbox is null without one": {
			body: `return ctx.sandbox === null`, noSandbox: true, want: `true`,
		},
		"ReadFile": {
			body:  `return ctx.sandbox.ReadFile("notes/a.txt")`,
			files: map[string]string{"notes/a.txt": "hello\nworld"}, want: `"hello\nworld"`,
		},
		"ReadFile through the container path": {
			body:  `return ctx.sandbox.ReadFile("/workspace/a.txt")`,
			files: map[string]string{"a.txt": "x"}, want: `"x"`,
		},
		"ReadFile missing is catchable": {
			body: `try { ctx.sandbox.ReadFile("nope.txt"); return "read" } catch (e) { return e instanceof Error && e.message.includes("ctx.sandbox.ReadFile") }`,
			want: `true`,
		},
		"ReadFile missing uncaught keeps the Go error": {
			body:    "\nreturn ctx.sandbox.ReadFile(\"nope.txt\")",
			wantErr: "ctx.sandbox.ReadFile", wantErrIs: executor.ErrNotFound, wantLine: 2,
		},
		"ReadFile needs a string": {
			body: `ctx.sandbox.ReadFile(42)`, wantErr: "TypeError: ctx.sandbox.ReadFile: path must be a string, got a number", wantLine: 1,
		},
		"WriteFile then ReadFile": {
			body: `ctx.sandbox.WriteFile("out/b.txt", "data ✓"); return ctx.sandbox.ReadFile("out/b.txt")`,
			want: `"data ✓"`,
			check: func(t *testing.T, sb *executortest.FakeSandbox, _ *hooks.Context) {
				b, err := os.ReadFile(filepath.Join(sb.Dir(), "out", "b.txt"))
				require.NoError(t, err)
				assert.Equal(t, "data ✓", string(b))
			},
		},
		"WriteFile content must be a string": {
			body: `ctx.sandbox.WriteFile("a.txt", {a: 1})`, wantErr: "content must be a string, got an object",
		},
		"ListDir": {
			body:  `return ctx.sandbox.ListDir(".").map(f => [f.name, f.is_dir ? -1 : f.size, f.is_dir, typeof f.mod_time, !isNaN(Date.parse(f.mod_time))])`,
			files: map[string]string{"a.txt": "abc", "sub/b.txt": ""},
			want:  `[["a.txt",3,false,"string",true],["sub",-1,true,"string",true]]`,
		},
		"Stat": {
			body:  `const s = ctx.sandbox.Stat("a.txt"); return [s.name, s.size, s.is_dir]`,
			files: map[string]string{"a.txt": "abcd"}, want: `["a.txt",4,false]`,
		},
		"EditFile": {
			body:  `const r = ctx.sandbox.EditFile("a.txt", [{old: "two", new: "2"}, {insert: "end", content: "four\n"}]); return [r.applied, r.content, ctx.sandbox.ReadFile("a.txt")]`,
			files: map[string]string{"a.txt": "one\ntwo\nthree\n"},
			want:  `[2,"one\n2\nthree\nfour\n","one\n2\nthree\nfour\n"]`,
		},
		"EditFile unknown key": {
			body: `ctx.sandbox.EditFile("a.txt", [{olde: "x"}])`, files: map[string]string{"a.txt": "x"},
			wantErr: `unknown field "olde"`,
		},
		"EditFile needs an array": {
			body: `ctx.sandbox.EditFile("a.txt", {old: "x", new: "y"})`, wantErr: "edits must be an array",
		},
		"Exec returns stdout": {
			body: `return ctx.sandbox.Exec(["sh", "-c", "echo out; echo err >&2"])`, want: `"out\n"`,
		},
		"Exec options": {
			body:  `return ctx.sandbox.Exec(["sh", "-c", "basename $(pwd); echo $GREETING; cat"], {dir: "sub", env: {GREETING: "hi"}, stdin: "in"})`,
			files: map[string]string{"sub/x": ""},
			want:  `"sub\nhi\nin"`,
		},
		"Exec unknown option": {
			body: `ctx.sandbox.Exec(["pwd"], {cwd: "sub"})`, wantErr: `options must be {dir?: string, env?: {NAME: string}, stdin?: string, timeout?: ms}: json: unknown field "cwd"`,
		},
		"Exec timeout option": {
			body:      "\nctx.sandbox.Exec([\"sleep\", \"5\"], {timeout: 50})",
			wantErrIs: executor.ErrTimeout, wantLine: 2,
		},
		"Exec non-zero exit throws with code and stderr": {
			body: `try { ctx.sandbox.Exec(["sh", "-c", "echo partial; echo broken >&2; exit 3"]) } catch (e) { return [e.exit_code, e.stdout, e.stderr, e.message] }`,
			want: `[3,"partial\n","broken\n","ctx.sandbox.Exec: command \"sh -c echo partial; echo broken >&2; exit 3\" exited with code 3: broken"]`,
		},
		"Exec missing program throws": {
			body:    `ctx.sandbox.Exec(["definitely-not-a-program-xyz"])`,
			wantErr: "ctx.sandbox.Exec",
		},
		"Exec argv must be an array": {
			body: `ctx.sandbox.Exec("ls -la")`, wantErr: `argv must be an array of strings like ["ls", "-la"], got a string`,
		},
		"Exec argv must not be empty": {
			body: `ctx.sandbox.Exec([])`, wantErr: "non-empty array",
		},
	})
}

func TestContextAPI(t *testing.T) {
	runCases(t, map[string]jsCase{
		"ids": {
			body: `return [ctx.user_id, ctx.chat_id, ctx.assistant_id]`, want: `["u1","c1","coder"]`,
		},
		"messages and options": {
			body: `return [messages, options]`,
			hc:   func(hc *hooks.Context) { hc.Options = map[string]any{"model": "m", "temperature": 0.5} },
			want: `[[{"role":"user","content":"hi"}],{"model":"m","temperature":0.5}]`,
		},
		"options default to an empty object": {body: `return options`, want: `{}`},
		"memory.context Set Get Has Del": {
			body: `const m = ctx.memory.context
m.Set("k", {a: [1, "x", null, true]})
const got = m.Get("k")
got.a.push("mutated")
const again = m.Get("k")
const had = m.Has("k")
m.Del("k")
return [again, had, m.Has("k"), m.Get("k") === undefined]`,
			want: `[{"a":[1,"x",null,true]},true,false,true]`,
			check: func(t *testing.T, _ *executortest.FakeSandbox, hc *hooks.Context) {
				_, ok := hc.RequestMemory.Get("k")
				assert.False(t, ok)
			},
		},
		"memory.context is visible to Go": {
			body: `ctx.memory.context.Set("generated_result", {ok: true})`, want: `null`,
			check: func(t *testing.T, _ *executortest.FakeSandbox, hc *hooks.Context) {
				v, ok := hc.RequestMemory.Get("generated_result")
				require.True(t, ok)
				assert.JSONEq(t, `{"ok":true}`, string(v))
			},
		},
		"memory refuses functions": {
			body: `ctx.memory.chat.Set("f", function () {})`, wantErr: "a function cannot be stored as JSON",
		},
		"memory refuses cycles": {
			body: `const o = {}; o.o = o; ctx.memory.chat.Set("o", o)`, wantErr: "ctx.memory.chat.Set",
		},
		"memory full": {
			body:    `ctx.memory.chat.Set("big", "x".repeat(100))`,
			hc:      func(hc *hooks.Context) { hc.ChatMemory = hooks.NewMemoryStore(10, 50) },
			wantErr: "memory store is full", wantErrIs: hooks.ErrMemoryFull,
		},
		"require is absent": {
			body: `return [typeof require, typeof process, typeof module.exports]`, want: `["undefined","undefined","object"]`,
		},
	})
}
