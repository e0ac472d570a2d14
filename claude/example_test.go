package claude_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

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

func ExampleParseArguments() {
	args, err := claude.ParseArguments(map[string]any{"max_turns": 20.0, "permission_mode": "acceptEdits", "allowed_tools": []any{"Read"}})
	fmt.Println(args.MaxTurns, args.PermissionMode, args.AllowedTools, args.MaxRetries, err)
	_, err = claude.ParseArguments(map[string]any{"max_turn": 3})
	fmt.Println(err)
	// Output:
	// 20 acceptEdits [Read] 2 <nil>
	// executor: invalid argument: sandbox.arguments.max_turn is not an argument of the claude runner; known: allowed_tools, disallowed_tools, max_retries, max_turns, permission_mode, sessions
}

func ExampleWithExit() {
	// The CLI was killed before it wrote its result.
	cut := `{"type":"system","subtype":"init","session_id":"s"}` + "\n"
	_, err := claude.New().Parse(context.Background(), strings.NewReader(cut), func(executor.Event) error { return nil })
	err = claude.WithExit(err, executor.ExecResult{ExitCode: -1, Signal: "SIGKILL"}, "")
	fmt.Println(errors.Is(err, claude.ErrNoResult))
	fmt.Println(err)
	// Output:
	// true
	// claude: the CLI's output ended without a result (after 1 lines, the last a "system"); it was killed by SIGKILL; see the CLI's stderr
}
