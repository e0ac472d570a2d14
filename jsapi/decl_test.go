package jsapi_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// declFields returns the members of the interface or declared constant
// called name in sandbox.d.ts, sorted, each with a "?" suffix when it is
// optional.
func declFields(t *testing.T, src, name string) []string {
	t.Helper()
	start := regexp.MustCompile(`(?m)^(interface ` + name + ` (extends \w+ )?\{|declare const ` + name + `: \{)$`).FindStringIndex(src)
	require.NotNil(t, start, "sandbox.d.ts declares %s", name)
	body := src[start[1]:]
	body = body[:strings.Index(body, "\n}")]
	member := regexp.MustCompile(`(?m)^  (?:readonly )?(\w+)(\??)[(:]`)
	var out []string
	for _, m := range member.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1]+m[2])
	}
	sort.Strings(out)
	return out
}

// declMembers is declFields without the optional marks.
func declMembers(t *testing.T, src, name string) []string {
	t.Helper()
	out := declFields(t, src, name)
	for i, f := range out {
		out[i] = strings.TrimSuffix(f, "?")
	}
	return out
}

// jsonFields returns the JSON names of a Go struct's fields, sorted, each
// with a "?" suffix when it is omitted when empty.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(","+opts+",", ",omitempty,") {
			name += "?"
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func readDecl(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("sandbox.d.ts")
	require.NoError(t, err)
	return string(b)
}

// TestDeclarations keeps sandbox.d.ts in step with the runtime: every
// member of ctx, ctx.sandbox, ctx.memory.*, a ListDir entry, the error
// Exec throws, Next's payload, log and console that a hook can see is
// declared, and nothing else is.
func TestDeclarations(t *testing.T) {
	src := readDecl(t)
	h, err := jsapi.Compile("src/index.js", []byte(`const keys = (o) => Object.keys(o).sort();
function Create(ctx) {
  let execError;
  try { ctx.sandbox.Exec(["false"]) } catch (e) { execError = e }
  const out = {
    Ctx: keys(ctx), Sandbox: keys(ctx.sandbox), Store: keys(ctx.memory.chat),
    StoreContext: keys(ctx.memory.context), Memory: keys(ctx.memory),
    FileInfo: keys(ctx.sandbox.ListDir(".")[0]), Stat: keys(ctx.sandbox.Stat("a.txt")),
    ExecError: keys(execError), log: keys(log), console: keys(console),
  };
  return { messages: [{ role: "user", content: JSON.stringify(out) }] };
}
function Next(ctx, payload) { return { content: JSON.stringify({ NextPayload: keys(payload) }) } }`), testOptions())
	require.NoError(t, err)
	sb := executortest.NewSandbox(t)
	sb.ExecFunc = func(context.Context, *executor.Cmd) (executor.ExecResult, error) {
		return executor.ExecResult{ExitCode: 1}, nil
	}
	require.NoError(t, sb.WriteFile(context.Background(), "a.txt", []byte("a")))
	hc := &hooks.Context{UserID: "u", ChatID: "c", AssistantID: "a", Sandbox: sb}
	res, err := h.Create(context.Background(), hc, []executor.Message{{Role: "user", Content: "hi"}})
	require.NoError(t, err)
	got := map[string][]string{}
	require.NoError(t, json.Unmarshal([]byte(res.Messages[0].Content), &got))
	next, err := h.Next(context.Background(), hc, hooks.NextPayload{Completion: &executor.Completion{}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(next.Content), &got))
	require.Len(t, got, 11)
	for name, runtime := range got {
		decl := name
		switch name {
		case "StoreContext":
			decl = "Store"
		case "Stat":
			decl = "FileInfo"
		case "Memory":
			assert.Equal(t, []string{"chat", "context"}, runtime)
			continue
		}
		assert.Equal(t, declMembers(t, src, decl), runtime, "sandbox.d.ts %s vs the runtime's object", decl)
	}
}

// TestDeclarationsMatchGoTypes: the shapes a hook receives or passes
// that are Go values converted through JSON are declared with the same
// names, and optional exactly where the Go field is omitted when empty.
func TestDeclarationsMatchGoTypes(t *testing.T) {
	src := readDecl(t)
	for decl, typ := range map[string]reflect.Type{
		"Message":          reflect.TypeFor[executor.Message](),
		"Completion":       reflect.TypeFor[executor.Completion](),
		"Usage":            reflect.TypeFor[executor.Usage](),
		"PermissionDenial": reflect.TypeFor[executor.PermissionDenial](),
		"Edit":             reflect.TypeFor[executor.Edit](),
		"EditResult":       reflect.TypeFor[executor.EditResult](),
		"Change":           reflect.TypeFor[executor.Change](),
		"ExecOptions":      jsapi.ExecOptionsType,
	} {
		assert.Equal(t, jsonFields(typ), declFields(t, src, decl), "sandbox.d.ts %s vs %s", decl, typ)
	}
}
