package local

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// OpenExecutor opens an Executor with o for a gateway's stack (it makes
// Options an agentbox.Backend): s's data directory is o's, log is the
// Logger when o has none. Local mode keeps a workspace until it is
// removed by hand, so a retention other than "forever" or the default is
// refused rather than ignored.
func (o Options) OpenExecutor(ctx context.Context, s executor.Shared, log hclog.Logger) (executor.Executor, error) {
	if s.Retention > 0 {
		return nil, fmt.Errorf("local executor: a workspace retention of %v: local mode does not sweep workspaces; leave the retention unset or use the docker executor: %w", s.Retention, executor.ErrInvalid)
	}
	if err := s.Fill(&o.DataDir, nil); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = log
	}
	return New(ctx, o)
}
