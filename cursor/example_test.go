package cursor_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/cursor"
	"github.com/agentbox/agentbox/executor"
)

func ExampleRunner_Invocation() {
	inv, err := cursor.New().Invocation(executor.RunRequest{
		Messages:     []executor.Message{{Role: "user", Content: "What is 1+1?"}},
		SystemPrompt: "Be brief.",
		Model:        "sonnet-4.5",
		Home:         "/home/agent",
		APIKey:       "key_from_the_connector",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(inv.Args, " "))
	fmt.Printf("stdin: %s\n", inv.Stdin)
	fmt.Println("files:", len(inv.Files))
	// Output:
	// cursor-agent -p --output-format stream-json --stream-partial-output --force --trust --workspace /workspace --model sonnet-4.5
	// stdin: What is 1+1?
	// files: 2
}

func ExampleRunner_Parse() {
	stdout := strings.NewReader(`{"type":"system","subtype":"init","session_id":"s1","model":"Auto","permissionMode":"default"}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"2"}]},"session_id":"s1","timestamp_ms":1}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"2"}]},"session_id":"s1"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":1500,"result":"2","session_id":"s1"}
`)
	comp, err := cursor.New().Parse(context.Background(), stdout, func(e executor.Event) error {
		fmt.Println(strings.TrimSpace(string(e.Kind) + " " + e.Text))
		return nil
	})
	fmt.Println(comp.Content, comp.FinishReason, comp.Duration, err)
	// Output:
	// init
	// text 2
	// 2 stop 1.5s <nil>
}
