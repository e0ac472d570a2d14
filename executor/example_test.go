package executor_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/agentbox/agentbox/executor"
)

func ExampleValidateID() {
	fmt.Println(executor.ValidateID("chat id", "chat_42.b"))
	err := executor.ValidateID("user id", "../root")
	fmt.Println(errors.Is(err, executor.ErrInvalid))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// user id "../root" starts with '.'; it must start with a letter, digit or '_': executor: invalid argument
}

func ExampleApplyEdits() {
	src := "func main() {\n\tx := 1\n\tdebugLog()\n}\n"
	res, err := executor.ApplyEdits(src, []executor.Edit{
		{Old: "x := 1", New: ptr("x := 2")},
		// Quoted without its indentation: the line is found and removed.
		{Old: "debugLog()", Delete: true},
		{Insert: "start", Content: ptr("package main\n")},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Content)
	fmt.Println(res.Applied, res.Changes)
	// Output:
	// package main
	// func main() {
	// 	x := 2
	// }
	// 3 [{1 0 1} {2 1 1} {3 1 0}]
}

func ExampleApplyEdits_ambiguous() {
	_, err := executor.ApplyEdits("a\nb\na\n", []executor.Edit{{Old: "a", New: ptr("c")}})
	fmt.Println(err)
	// Output:
	// edit 1 (replace): old text "a" matches 2 places (lines 1, 3); include more surrounding lines to make it unique or set all:true to change every one
}

func ExampleOpenWorkspace() {
	data, err := os.MkdirTemp("", "agentbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(data) }()

	// Where the sandbox user is 1000:1000, pass 1000, 1000 (needs root).
	dir, err := executor.PrepareWorkspace(data, "alice", "c1", -1, -1)
	if err != nil {
		log.Fatal(err)
	}
	ws, err := executor.OpenWorkspace(dir, executor.WorkspaceOptions{UID: -1, GID: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = ws.Close() }()

	ctx := context.Background()
	if err := ws.WriteFile(ctx, "/workspace/notes/todo.md", []byte("- ship\n")); err != nil {
		log.Fatal(err)
	}
	list, _ := ws.ListDir(ctx, "notes")
	fmt.Println(list[0].Name, list[0].Size)
	_, err = ws.ReadFile(ctx, "/etc/passwd")
	fmt.Println(errors.Is(err, executor.ErrPathEscapes))
	// Output:
	// todo.md 7
	// true
}
