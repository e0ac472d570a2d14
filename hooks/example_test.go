package hooks_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
)

// The middleware's view: RunCreate before the agent, RunNext after it.
func ExampleRunCreate() {
	h := hooks.Funcs{CreateFunc: func(_ context.Context, hc *hooks.Context, _ []executor.Message) (*hooks.CreateResult, error) {
		if hc.Sandbox == nil {
			return nil, &hooks.HookError{Hook: "Create", Message: "a sandbox is required"}
		}
		return nil, nil
	}}
	_, err := hooks.RunCreate(context.Background(), h, &hooks.Context{}, nil)
	fmt.Println(errors.Is(err, hooks.ErrRejected), err)
	// Output: true request rejected by the Create hook: a sandbox is required
}

func ExampleRunNext() {
	h := hooks.Funcs{NextFunc: func(_ context.Context, _ *hooks.Context, p hooks.NextPayload) (*hooks.NextResult, error) {
		return &hooks.NextResult{Content: p.Completion.Content + " (checked)"}, nil
	}}
	got, err := hooks.RunNext(context.Background(), h, &hooks.Context{}, &executor.Completion{Content: "done"}, nil)
	fmt.Println(got.Content, err)
	// Output: done (checked) <nil>
}
