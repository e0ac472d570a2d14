package scripted

import (
	"context"
	"errors"
	"io"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// NoPreStart gives a fake middleware.ModelRouter the methods its tests do
// not script: every assistant validates, and neither a route for a token
// chosen beforehand nor a warm-up route opens (errors.ErrUnsupported), as
// for a router with which no CLI is started ahead of its request.
type NoPreStart struct{}

// Validate accepts every assistant.
func (NoPreStart) Validate(*middleware.Assistant, executor.Capabilities) error { return nil }

// OpenToken fails with errors.ErrUnsupported.
func (NoPreStart) OpenToken(context.Context, executor.Sandbox, *middleware.Assistant, string) (middleware.ModelRoute, error) {
	return nil, errors.ErrUnsupported
}

// OpenWarmUp fails with errors.ErrUnsupported.
func (NoPreStart) OpenWarmUp(context.Context, executor.Sandbox, *middleware.Assistant, string) (io.Closer, error) {
	return nil, errors.ErrUnsupported
}
