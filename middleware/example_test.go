package middleware_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

// ExampleNew wires an Orchestrator over a fake executor and a scripted
// runner, installs it in front of a gateway's own handler and answers one
// sandboxed and one plain request.
func ExampleNew() {
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "scripted",
		Spec:   executor.Spec{Image: "agentbox/sandbox-claude:latest", Timeout: time.Minute},
	}}
	catalog, err := middleware.NewCatalog(coder, &middleware.Assistant{ID: "qa"})
	if err != nil {
		panic(err)
	}
	tmp, cleanup := tempDir()
	defer cleanup()
	fake := &executortest.FakeExecutor{DataDir: tmp}
	fake.OnCreate = func(sb *executortest.FakeSandbox) {
		sb.ExecFunc = scripted.Text(executor.Usage{InputTokens: 12, OutputTokens: 3}, "Done: ", "hello.txt written.").Exec
	}
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog:     catalog,
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return fake, nil },
		Runners:     []executor.Runner{&scripted.Runner{}},
	})
	if err != nil {
		panic(err)
	}
	defer func() { _ = o.Close() }()

	gateway := middleware.HandlerFunc(func(_ context.Context, req *middleware.Request, _ middleware.Emit) (*middleware.Response, error) {
		return &middleware.Response{Content: "plain answer from " + req.Model, FinishReason: "stop"}, nil
	})
	h := middleware.Chain(gateway, o.Wrap)

	for _, id := range []string{"coder", "qa"} {
		resp, err := h.Handle(context.Background(), &middleware.Request{
			AssistantID: id, Model: id, UserID: "alice", ChatID: "1",
			Messages: []executor.Message{{Role: "user", Content: "write hello.txt"}},
		}, func(ev executor.Event) error {
			if ev.Kind == executor.EventSandbox {
				fmt.Println("sandbox:", ev.Text)
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %q (%d tokens in)\n", id, resp.Content, resp.Usage.InputTokens)
	}
	// The sandbox is removed after the response ("closed" reaches only a
	// client still listening, such as a canceled one).
	// Output:
	// sandbox: ready
	// coder: "Done: hello.txt written." (12 tokens in)
	// qa: "plain answer from qa" (0 tokens in)
}

// ExampleKindOf shows how a caller branches on a failure.
func ExampleKindOf() {
	err := error(middleware.Errorf(middleware.KindBusy, executor.ErrBusy, "the chat is busy"))
	err = fmt.Errorf("gateway: %w", err)
	fmt.Println(middleware.KindOf(err), middleware.AsError(err).Retry)
	fmt.Println(middleware.KindOf(context.Canceled))
	// Output:
	// busy true
	// canceled
}
