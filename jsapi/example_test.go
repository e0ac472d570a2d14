package jsapi_test

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// Compile a TypeScript hook once, then run it per request: Create adds a
// message and records something in ctx.memory.context, Next reads it back
// and replaces the response.
func ExampleCompile() {
	src := `function Create(ctx: any, messages: { role: string; content: string }[]) {
  ctx.memory.context.Set("asked", messages.length);
  return { messages: [...messages, { role: "user", content: "Answer in one line." }] };
}
function Next(ctx: any, payload: { completion: { content: string } | null }) {
  return { content: payload.completion!.content + " (" + ctx.memory.context.Get("asked") + " message)" };
}`
	h, err := jsapi.Compile("src/index.ts", []byte(src), jsapi.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	hc := &hooks.Context{UserID: "alice", ChatID: "c1", AssistantID: "coder"}
	msgs, err := hooks.RunCreate(context.Background(), h, hc, []executor.Message{{Role: "user", Content: "hi"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(msgs), msgs[1].Content)
	resp, err := hooks.RunNext(context.Background(), h, hc, &executor.Completion{Content: "hello"}, nil)
	fmt.Println(resp.Content, err)
	// Output:
	// 2 Answer in one line.
	// hello (1 message) <nil>
}

// Syntax errors are reported at load time with the author's file:line:col.
func ExampleCompile_syntaxError() {
	_, err := jsapi.Compile("src/index.ts", []byte("function Create(ctx) {\n  return {;\n}"), jsapi.Options{})
	fmt.Println(err)
	// Output:
	// jsapi: hook script does not compile: src/index.ts:2:11: Expected identifier but found ";"
}

// Load an assistant's hooks from its directory (src/index.ts, else
// src/index.js).
func ExampleLoad() {
	h, err := jsapi.Load("../examples/hooks/coder", jsapi.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.Name(), h.HasCreate(), h.HasNext())
	// Output:
	// src/index.ts true true
}
