package codex_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
)

func ExampleRunner_Invocation() {
	inv, err := codex.New().Invocation(executor.RunRequest{
		Messages: []executor.Message{{Role: "user", Content: "What is 1+1?"}},
		Model:    "gpt-5.5", Workdir: "/workspace", Home: "/home/agent",
		ModelBaseURL: "http://127.0.0.1:7000", APIKey: "per-request-token",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(inv.Args[:3], inv.Args[len(inv.Args)-2:])
	fmt.Printf("stdin: %s\n", inv.Stdin)
	// Output:
	// [codex exec --json] [--ephemeral -]
	// stdin: What is 1+1?
}

func ExampleRunner_Parse() {
	out := `{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"1+1 = 2."}}
{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":5}}
`
	comp, err := codex.New().Parse(context.Background(), strings.NewReader(out), func(e executor.Event) error {
		fmt.Println(e.Kind)
		return nil
	})
	fmt.Println(comp.Content, comp.FinishReason, comp.Usage.InputTokens, comp.Usage.CacheReadInputTokens, err)
	// Output:
	// init
	// text
	// 1+1 = 2. stop 60 40 <nil>
}
