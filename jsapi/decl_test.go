package jsapi_test

import (
	"context"
	"encoding/json"
	"os"
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

// declMembers returns the member names of the interface or declared
// constant called name in sandbox.d.ts, sorted.
func declMembers(t *testing.T, src, name string) []string {
	t.Helper()
	start := regexp.MustCompile(`(?m)^(interface ` + name + ` (extends \w+ )?\{|declare const ` + name + `: \{)$`).FindStringIndex(src)
	require.NotNil(t, start, "sandbox.d.ts declares %s", name)
	body := src[start[1]:]
	body = body[:strings.Index(body, "\n}")]
	member := regexp.MustCompile(`(?m)^  (?:readonly )?(\w+)\??[(:]`)
	var out []string
	for _, m := range member.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

// TestDeclarations keeps sandbox.d.ts in step with the runtime: every
// member of ctx, ctx.sandbox, ctx.memory.*, a ListDir entry, log and
// console that a hook can see is declared, and nothing else is.
func TestDeclarations(t *testing.T) {
	b, err := os.ReadFile("sandbox.d.ts")
	require.NoError(t, err)
	src := string(b)
	h, err := jsapi.Compile("src/index.js", []byte(`function Create(ctx) {
  const keys = (o) => Object.keys(o).sort();
  const out = {
    Ctx: keys(ctx), Sandbox: keys(ctx.sandbox), Store: keys(ctx.memory.chat),
    StoreContext: keys(ctx.memory.context), Memory: keys(ctx.memory),
    FileInfo: keys(ctx.sandbox.ListDir(".")[0]), log: keys(log), console: keys(console),
  };
  return { messages: [{ role: "user", content: JSON.stringify(out) }] };
}`), testOptions())
	require.NoError(t, err)
	sb := executortest.NewSandbox(t)
	require.NoError(t, sb.WriteFile(context.Background(), "a.txt", []byte("a")))
	res, err := h.Create(context.Background(), &hooks.Context{UserID: "u", ChatID: "c", AssistantID: "a", Sandbox: sb},
		[]executor.Message{{Role: "user", Content: "hi"}})
	require.NoError(t, err)
	var got map[string][]string
	require.NoError(t, json.Unmarshal([]byte(res.Messages[0].Content), &got))
	for name, runtime := range got {
		decl := name
		switch name {
		case "StoreContext":
			decl = "Store"
		case "Memory":
			assert.Equal(t, []string{"chat", "context"}, runtime)
			continue
		}
		assert.Equal(t, declMembers(t, src, decl), runtime, "sandbox.d.ts %s vs the runtime's object", decl)
	}
}
