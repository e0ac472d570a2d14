package middleware_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// BenchmarkPassThrough measures what the middleware adds to a request for
// an assistant without a sandbox (a catalog lookup and a context value)
// against calling the next handler directly.
func BenchmarkPassThrough(b *testing.B) {
	e := newEnv(b)
	next := middleware.HandlerFunc(func(context.Context, *middleware.Request, middleware.Emit) (*middleware.Response, error) {
		return &middleware.Response{Content: "ok"}, nil
	})
	req := &middleware.Request{AssistantID: "qa", Messages: []executor.Message{{Role: "user", Content: "hi"}}}
	ctx := context.Background()
	for name, h := range map[string]middleware.Handler{"direct": next, "middleware": e.o.Wrap(next)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := h.Handle(ctx, req, nil)
				require.NoError(b, err)
				require.Equal(b, "ok", resp.Content)
			}
		})
	}
}
