package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/local"
)

// Example runs one command in a bubblewrap sandbox over a chat's workspace.
// It needs bubblewrap, root and a helper build, so it is compiled, not run,
// by go test.
func Example() {
	ctx := context.Background()
	e, err := local.New(ctx, local.Options{DataDir: "/var/lib/agentbox", HelperBinary: "/usr/local/lib/agentbox/agentbox-helper"})
	if err != nil {
		fmt.Println(err) // a *local.HealthError listing what this host lacks
		return
	}
	defer func() { _ = e.Close() }()

	sb, err := e.Create(ctx, executor.Spec{UserID: "alice", ChatID: "42", MemoryBytes: 1 << 30, Timeout: 10 * time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = sb.Close(ctx) }()
	res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "echo hello from $(id -u)"}, Stdout: os.Stdout})
	fmt.Println(res.ExitCode, res.Path, err)
}

// ExampleCheck is the fail-fast health check a gateway runs at start-up;
// it names every missing piece at once.
func ExampleCheck() {
	err := local.Check(context.Background(), local.Options{
		DataDir: os.TempDir(), Bwrap: "/nonexistent/bwrap", HelperBinary: "", Commands: []string{},
	})
	var he *local.HealthError
	fmt.Println(errors.As(err, &he), errors.Is(err, executor.ErrUnavailable))
	for _, p := range he.Problems[:2] {
		fmt.Println(p[:30])
	}
	// Output:
	// true true
	// bubblewrap is not installed (/
	// no helper binary is configured
}
