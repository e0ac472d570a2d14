package middleware

import (
	"context"
	"errors"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// EgressRouter opens the egress proxy of one run whose assistant has an
// egress policy (Sandbox.Egress): the allowlist the agent reaches the
// network through (middleware/modelroute's Egress serves it on the
// helper's egress relay). Implementations are safe for concurrent use.
type EgressRouter interface {
	// Open starts a's proxy for the run in sb, logging through log; the
	// returned Closer stops it when the run ends.
	Open(ctx context.Context, sb executor.Sandbox, a *Assistant, log hclog.Logger) (io.Closer, error)
}

// openEgress opens the run's egress proxy, if its assistant has a policy.
func (r *run) openEgress(ctx context.Context, sb executor.Sandbox) (io.Closer, error) {
	if r.a.Sandbox.Egress == nil {
		return nil, nil
	}
	if r.o.opts.Egress == nil {
		return nil, errors.New("middleware: the assistant has sandbox.egress but the Orchestrator has no Options.Egress (modelroute.NewEgress)")
	}
	return r.o.opts.Egress.Open(ctx, sb, r.a, r.log)
}
