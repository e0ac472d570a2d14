package docker

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// OpenExecutor opens an Executor with o for a gateway's stack (it makes
// Options an agentbox.Backend): s's data directory and retention fill
// o's, log is the Logger when o has none, and without a HelperBinary the
// image's own helper runs (UseImageHelper), as the agentbox/sandbox-*
// images carry it.
func (o Options) OpenExecutor(ctx context.Context, s executor.Shared, log hclog.Logger) (executor.Executor, error) {
	if err := s.Fill(&o.DataDir, &o.Retention); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = log
	}
	if o.HelperBinary == "" {
		o.UseImageHelper = true
	}
	return New(ctx, o)
}
