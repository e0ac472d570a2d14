package jsapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// benchHooks does three sandbox calls per request: WriteFile and ReadFile
// in Create, ListDir in Next.
const benchHooks = `
function Create(ctx, messages) {
  ctx.sandbox.WriteFile("notes.txt", "hello from the hook");
  const s = ctx.sandbox.ReadFile("notes.txt");
  if (s.length !== 19) throw new Error("short read");
  return null;
}
function Next(ctx, payload) {
  const n = ctx.sandbox.ListDir(".").length;
  if (n < 1) throw new Error("empty workspace");
  return null;
}`

// BenchmarkHookOverhead is the per-request cost of the hooks (compiled
// once at load, as the gateway does: Create and Next in fresh runtimes with
// three sandbox calls) against the same three calls made from Go, in the
// same run, on the same host-side workspace.
func BenchmarkHookOverhead(b *testing.B) {
	ctx := context.Background()
	sb := executortest.NewSandbox(b)
	msgs := []executor.Message{{Role: "user", Content: "hi"}}
	b.Run("go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := sb.WriteFile(ctx, "notes.txt", []byte("hello from the hook")); err != nil {
				b.Fatal(err)
			}
			if s, err := sb.ReadFile(ctx, "notes.txt"); err != nil || len(s) != 19 {
				b.Fatal(err)
			}
			if fis, err := sb.ListDir(ctx, "."); err != nil || len(fis) < 1 {
				b.Fatal(err)
			}
		}
	})
	for _, file := range []string{"src/index.js", "src/index.ts"} {
		h, err := jsapi.Compile(file, []byte(benchHooks), jsapi.Options{Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(file[len("src/"):], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				hc := &hooks.Context{UserID: "u", ChatID: "c", AssistantID: "a", Sandbox: sb}
				if _, err := h.Create(ctx, hc, msgs); err != nil {
					b.Fatal(err)
				}
				if _, err := h.Next(ctx, hc, hooks.NextPayload{Completion: &executor.Completion{Content: "ok"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
