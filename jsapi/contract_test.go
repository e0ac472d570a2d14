package jsapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// compileBoth compiles src as .js and as .ts.
func compileBoth(t *testing.T, src string) map[string]*jsapi.Hooks {
	t.Helper()
	out := map[string]*jsapi.Hooks{}
	for _, lang := range langs {
		h, err := jsapi.Compile(lang.file, []byte(src), testOptions())
		require.NoError(t, err, lang.file)
		out[lang.name] = h
	}
	return out
}

var convo = []executor.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}

func TestUIMessagesReachTheCallerInOrder(t *testing.T) {
	src := `function Create(ctx) {
  const id = ctx.SendStream({ type: "loading", props: { message: "Preparing" } });
  const other = ctx.SendStream({ type: "text" });
  ctx.Replace(id, { type: "text", props: { content: "ready", n: 2 } });
  ctx.End(id);
  ctx.End(other);
  return null;
}`
	for lang, h := range compileBoth(t, src) {
		t.Run(lang, func(t *testing.T) {
			var events []executor.Event
			hc := &hooks.Context{Emit: func(e executor.Event) error { events = append(events, e); return nil }}
			_, err := h.Create(context.Background(), hc, convo)
			require.NoError(t, err)
			require.Len(t, events, 5)
			for _, e := range events {
				assert.Equal(t, executor.EventUI, e.Kind)
			}
			id, other := events[0].UI.ID, events[1].UI.ID
			assert.NotEqual(t, id, other)
			assert.Equal(t, []executor.UIMessage{
				{ID: id, Action: "send", Type: "loading", Props: map[string]any{"message": "Preparing"}},
				{ID: other, Action: "send", Type: "text"},
				{ID: id, Action: "replace", Type: "text", Props: map[string]any{"content": "ready", "n": float64(2)}},
				{ID: id, Action: "end"},
				{ID: other, Action: "end"},
			}, []executor.UIMessage{*events[0].UI, *events[1].UI, *events[2].UI, *events[3].UI, *events[4].UI})
		})
	}
}

func TestUIMessageErrors(t *testing.T) {
	runCases(t, map[string]jsCase{
		"SendStream needs a type":    {body: `ctx.SendStream({props: {}})`, wantErr: "non-empty string type"},
		"SendStream needs an object": {body: `ctx.SendStream("hi")`, wantErr: "message must be an object, got a string"},
		"Replace needs an id":        {body: `ctx.Replace(undefined, {type: "text"})`, wantErr: "id must be the non-empty string ctx.SendStream returned"},
		"End needs an id":            {body: `ctx.End(3)`, wantErr: "id must be the non-empty string"},
		"Emit failure throws": {
			body: `try { ctx.SendStream({type: "x"}); return "sent" } catch (e) { return e.message }`,
			hc: func(hc *hooks.Context) {
				hc.Emit = func(executor.Event) error { return errors.New("client went away") }
			},
			want: `"ctx.SendStream: client went away"`,
		},
	})
}

func TestLogAndConsoleGoToTheLogger(t *testing.T) {
	src := `function Create(ctx) {
  log.Info("%s has %d items (%i) at %f: %j %v %o %%", "cart", 3.7, 9.2, 1.5, {a: [1]}, [2], null);
  log.Debug("extra", 1, {b: true}, undefined, null, "s");
  log.Warn("warned");
  log.Error("failed: %s", new TypeError("bad"));
  log.Trace("not shown at debug level");
  console.log("console", "log");
  console.info("console info");
  console.debug("console debug");
  console.warn("console warn");
  console.error("console error", {toJSON() { return "custom" }});
}`
	for lang, h := range compileBoth(t, src) {
		t.Run(lang, func(t *testing.T) {
			logger, out := logSink(hclog.Debug)
			_, err := h.Create(context.Background(), &hooks.Context{Logger: logger}, convo)
			require.NoError(t, err)
			got := out.String()
			for _, want := range []string{
				`[INFO]  cart has 3 items (9) at 1.5: {"a":[1]} [2] null %: file=src/index.`,
				`[DEBUG] extra 1 {"b":true} undefined null s:`,
				`[WARN]  warned:`,
				`[ERROR] failed: TypeError: bad:`,
				`[INFO]  console log:`,
				`[INFO]  console info:`,
				`[DEBUG] console debug:`,
				`[WARN]  console warn:`,
				`[ERROR] console error "custom":`,
			} {
				assert.Contains(t, got, want)
			}
			assert.NotContains(t, got, "not shown")
		})
	}
}

func TestLogLinesAreCapped(t *testing.T) {
	h, err := jsapi.Compile("src/index.js", []byte(`function Create() { for (let i = 0; i < 5000; i++) log.Info("line %d", i) }`),
		jsapi.Options{MaxLogLines: 10})
	require.NoError(t, err)
	logger, out := logSink(hclog.Info)
	_, err = h.Create(context.Background(), &hooks.Context{Logger: logger}, convo)
	require.NoError(t, err)
	assert.Equal(t, 11, strings.Count(out.String(), "\n"))
	assert.Contains(t, out.String(), "hook log output capped")
}

// Contract rules of hooks.Hooks, as a script sees them.
func TestContractCreateReturnValues(t *testing.T) {
	cases := map[string]struct {
		ret     string
		want    []executor.Message
		wantErr string
	}{
		"null keeps":         {ret: `null`, want: convo},
		"undefined keeps":    {ret: `undefined`, want: convo},
		"no messages keeps":  {ret: `{}`, want: convo},
		"same messages":      {ret: `{ messages }`, want: convo},
		"messages replace":   {ret: `{ messages: [...messages.slice(1), { role: "user", content: "more" }] }`, want: []executor.Message{convo[1], {Role: "user", Content: "more"}}},
		"empty replaces":     {ret: `{ messages: [] }`, want: []executor.Message{}},
		"number is an error": {ret: `42`, wantErr: "Create returned a number; return {messages}"},
		"array is an error":  {ret: `[]`, wantErr: "Create returned an array"},
		"bad content":        {ret: `{ messages: [{ role: "user", content: 7 }] }`, wantErr: "is not {messages: [{role, content}]}"},
	}
	for name, tc := range cases {
		src := "function Create(ctx, messages, options) { return " + tc.ret + " }"
		for lang, h := range compileBoth(t, src) {
			t.Run(name+"/"+lang, func(t *testing.T) {
				got, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, convo)
				if tc.wantErr != "" {
					assert.ErrorIs(t, err, hooks.ErrRejected)
					assert.ErrorContains(t, err, tc.wantErr)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
			})
		}
	}
}

func TestContractCreateThrowRejects(t *testing.T) {
	src := "function Create(ctx) {\n  // the check\n  throw new Error(\"Node.js is required\");\n}\n"
	for lang, h := range compileBoth(t, src) {
		t.Run(lang, func(t *testing.T) {
			_, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, convo)
			require.ErrorIs(t, err, hooks.ErrRejected)
			var rej *hooks.RejectedError
			require.ErrorAs(t, err, &rej)
			assert.Equal(t, "Node.js is required", rej.Message)
			var he *hooks.HookError
			require.ErrorAs(t, err, &he)
			assert.Equal(t, "src/index."+lang+":3:9", he.Position)
		})
	}
}

func TestContractNextPayloadAndReturnValues(t *testing.T) {
	completion := &executor.Completion{Content: "the answer", FinishReason: executor.FinishStop, Usage: executor.Usage{InputTokens: 10, OutputTokens: 5}}
	cases := map[string]struct {
		body       string
		completion *executor.Completion
		runErr     error
		want       *executor.Completion
		wantRunErr bool
		wantLog    string
	}{
		"payload shape": {
			body:       `if (payload.completion.content !== "the answer" || payload.completion.usage.input_tokens !== 10 || payload.error !== null) throw new Error("bad payload " + JSON.stringify(payload)); return null`,
			completion: completion, want: completion,
		},
		"error payload": {
			body:   `if (payload.completion !== null || payload.error !== "agent crashed") throw new Error("bad payload"); return { content: "sorry: " + payload.error }`,
			runErr: errors.New("agent crashed"),
			want:   &executor.Completion{Content: "sorry: agent crashed", FinishReason: executor.FinishStop},
		},
		"null keeps": {body: `return null`, completion: completion, want: completion},
		"content replaces, usage stays": {
			body: `return { content: payload.completion.content.toUpperCase(), finish_reason: "length" }`, completion: completion,
			want: &executor.Completion{Content: "THE ANSWER", FinishReason: "length", Usage: completion.Usage},
		},
		"bad shape is logged": {
			body: `return { text: "x" }`, completion: completion, want: completion, wantLog: "is not {content: string",
		},
		"throw is logged": {
			body: `throw new Error("next broke")`, completion: completion, want: completion, wantLog: "next broke",
		},
		"throw keeps the agent error": {
			body: `throw new Error("next broke")`, runErr: errors.New("agent crashed"), wantRunErr: true, wantLog: "next broke",
		},
	}
	for name, tc := range cases {
		src := "function Next(ctx, payload, options) { " + tc.body + " }"
		for lang, h := range compileBoth(t, src) {
			t.Run(name+"/"+lang, func(t *testing.T) {
				logger, out := logSink(hclog.Debug)
				got, err := hooks.RunNext(context.Background(), h, &hooks.Context{Logger: logger}, tc.completion, tc.runErr)
				if tc.wantRunErr {
					assert.Equal(t, tc.runErr, err)
				} else {
					assert.NoError(t, err)
				}
				assert.Equal(t, tc.want, got)
				if tc.wantLog != "" {
					assert.Contains(t, out.String(), tc.wantLog)
				}
			})
		}
	}
}

func TestContractAbsentHooks(t *testing.T) {
	cases := map[string]struct {
		src              string
		hasCreate, hasNx bool
	}{
		"only Create":    {`function Create() {}`, true, false},
		"only Next":      {`function Next() {}`, false, true},
		"none":           {`const x = 1;`, false, false},
		"exported (ESM)": {`export function Create() {} export const Next = () => null;`, true, true},
		"module.exports": {`module.exports = { Next() { return null } }`, false, true},
		"default export": {`export default { Create() { return null } }`, true, false},
	}
	for name, tc := range cases {
		for lang, h := range compileBoth(t, tc.src) {
			t.Run(name+"/"+lang, func(t *testing.T) {
				assert.Equal(t, tc.hasCreate, h.HasCreate())
				assert.Equal(t, tc.hasNx, h.HasNext())
				msgs, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, convo)
				require.NoError(t, err)
				assert.Equal(t, convo, msgs)
			})
		}
	}
}

func TestContractRequestMemorySharedChatMemorySurvives(t *testing.T) {
	src := `function Create(ctx) {
  ctx.memory.context.Set("step", "created");
  ctx.memory.chat.Set("count", (ctx.memory.chat.Get("count") || 0) + 1);
}
function Next(ctx) {
  return { content: ctx.memory.context.Get("step") + " " + ctx.memory.chat.Get("count") };
}`
	for lang, h := range compileBoth(t, src) {
		t.Run(lang, func(t *testing.T) {
			chats := hooks.NewChatMemory(10, 0, 0)
			for i, want := range []string{"created 1", "created 2"} {
				hc := &hooks.Context{ChatMemory: chats.For("u", "c")}
				_, err := hooks.RunCreate(context.Background(), h, hc, convo)
				require.NoError(t, err)
				got, err := hooks.RunNext(context.Background(), h, hc, &executor.Completion{}, nil)
				require.NoError(t, err, i)
				assert.Equal(t, want, got.Content)
			}
		})
	}
}

func TestCompileErrorsPointAtTheSource(t *testing.T) {
	cases := map[string]struct {
		file, src, want string
	}{
		"js syntax":           {"src/index.js", "function Create(ctx) {\n  return {;\n}", "src/index.js:2:11"},
		"ts syntax":           {"src/index.ts", "interface A { a: string }\nfunction Create(ctx: A) {\n  const x: = 1;\n}", "src/index.ts:3:12"},
		"top-level throw":     {"src/index.ts", "type T = number;\nconst n: T = 1;\nthrow new Error(\"bad config\");\n", "src/index.ts:3:7"},
		"hook not a function": {"src/index.js", "var Create = 42;", "Create is a number, not a function"},
		"bad extension":       {"src/index.py", "x", "must end in .ts or .js"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := jsapi.Compile(tc.file, []byte(tc.src), jsapi.Options{})
			require.ErrorIs(t, err, jsapi.ErrCompile)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	_, err := jsapi.Load(dir, jsapi.Options{})
	require.ErrorIs(t, err, jsapi.ErrNoHooks)

	h, err := jsapi.Load("../examples/hooks/coder", jsapi.Options{})
	require.NoError(t, err)
	assert.Equal(t, "src/index.ts", h.Name())
	assert.True(t, h.HasCreate())
	assert.True(t, h.HasNext())
}
