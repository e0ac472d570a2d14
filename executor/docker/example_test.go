package docker_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
)

// Example runs one command in a sandbox over a chat's workspace and
// removes the container; the workspace stays for the chat's next request.
// It needs a Docker daemon and the sandbox image, so it is compiled, not
// run, by go test.
func Example() {
	ctx := context.Background()
	e, err := docker.New(ctx, docker.Options{DataDir: "/var/lib/agentbox", Image: "agentbox/sandbox-claude:latest"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Close() }()

	sb, err := e.Create(ctx, executor.Spec{UserID: "alice", ChatID: "42", MemoryBytes: 1 << 30, Timeout: 10 * time.Minute})
	if err != nil {
		fmt.Println(err) // errors.Is(err, executor.ErrBusy) when the chat is in use
		return
	}
	defer func() { _ = sb.Close(ctx) }()

	if err := sb.WriteFile(ctx, "hello.sh", []byte("echo hello from $(id -u)\n")); err != nil {
		fmt.Println(err)
		return
	}
	res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "hello.sh"}, Stdout: os.Stdout, Timeout: time.Minute})
	fmt.Println(res.ExitCode, res.Path, err)
}
