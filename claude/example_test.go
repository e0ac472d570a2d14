package claude_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
)

func ExampleRunner_Invocation() {
	inv, err := claude.New().Invocation(executor.RunRequest{
		Messages:     []executor.Message{{Role: "user", Content: "What is 1+1?"}},
		Workdir:      "/workspace",
		Home:         "/home/agent",
		ModelBaseURL: "http://127.0.0.1:7000",
		APIKey:       "per-request-token",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(inv.Args[:8])
	fmt.Print(string(inv.Stdin))
	// Output:
	// [claude -p --verbose --output-format stream-json --input-format stream-json --include-partial-messages]
	// {"message":{"content":"What is 1+1?","role":"user"},"parent_tool_use_id":null,"session_id":"","type":"user"}
}

func ExampleRunner_Parse() {
	raw, err := os.ReadFile("testdata/cli-2.1.197/a_plain_text.jsonl")
	if err != nil {
		fmt.Println(err)
		return
	}
	comp, err := claude.New().Parse(context.Background(), bytes.NewReader(raw), func(e executor.Event) error {
		fmt.Println("event:", e.Kind)
		return nil
	})
	fmt.Println(comp.Content, comp.FinishReason, comp.Usage.OutputTokens, err)
	// Output:
	// event: init
	// event: text
	// Hello from fake model. 1+1=2. stop 14 <nil>
}
