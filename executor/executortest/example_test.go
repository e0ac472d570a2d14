package executortest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
)

// A FakeExecutor whose sandboxes answer every command from a script.
func ExampleFakeExecutor() {
	data, err := os.MkdirTemp("", "executortest")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(data) }()
	ex := &executortest.FakeExecutor{DataDir: data}
	ex.OnCreate = func(sb *executortest.FakeSandbox) {
		sb.ExecFunc = func(_ context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
			_, _ = fmt.Fprintf(cmd.Stdout, "ran %v", cmd.Args)
			return executor.ExecResult{ExitCode: 0}, nil
		}
	}
	defer func() { _ = ex.Close() }()

	ctx := context.Background()
	spec := executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 10 * time.Millisecond}
	sb, err := ex.Create(ctx, spec)
	if err != nil {
		log.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = sb.Exec(ctx, &executor.Cmd{Args: []string{"claude", "-p"}, Stdout: &out})
	fmt.Println(out.String())

	_, err = ex.Create(ctx, spec)
	fmt.Println(errors.Is(err, executor.ErrBusy))
	_ = sb.Close(ctx)
	fmt.Println(ex.Sandboxes()[0].Calls()[0].Args)
	// Output:
	// ran [claude -p]
	// true
	// [claude -p]
}

// A backend runs the suite against itself in its own tests.
func ExampleRunConformance() {
	_ = func(t *testing.T) {
		executortest.RunConformance(t, func(t *testing.T) executor.Executor {
			ex := executortest.NewExecutor(t) // a real backend here
			ex.OnCreate = func(sb *executortest.FakeSandbox) { sb.ExecFunc = sb.HostExec }
			return ex
		}, executor.Spec{Image: "agentbox/sandbox-claude:latest", LeaseWait: time.Second})
	}
}
