package helper_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// ExampleServeArgs is the container's main command (run it under Init with
// the per-sandbox directory mounted at /run/agentbox).
func ExampleServeArgs() {
	args := helper.ServeArgs("/usr/local/bin/agentbox-helper", helper.ServeOptions{
		Deadline:  time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		ModelPort: 4000,
	})
	fmt.Println(strings.Join(args, " "))
	// Output:
	// /usr/local/bin/agentbox-helper serve --dir /run/agentbox --workdir /workspace --deadline 2026-01-02T15:04:05Z --model-port 4000
}

// ExampleWaitReady waits for a sandbox's helper, then runs a command in it.
func ExampleWaitReady() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hostDir := "/var/lib/agentbox/sandboxes/abc123" // mounted at /run/agentbox
	c, err := helper.WaitReady(ctx, hostDir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Close() }()
	res, err := c.Exec(ctx, &executor.Cmd{
		Args:   []string{"sh", "-c", "ls -la"},
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	fmt.Println(res.ExitCode, err)
}
