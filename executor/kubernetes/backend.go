package kubernetes

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// OpenExecutor opens an Executor with o for a gateway's stack (it makes
// Options an agentbox.Backend; a gateway that never names it never links
// client-go): s's retention fills o's (the workspaces are claims, not
// host directories, so s's data directory holds nothing of this backend),
// log is the Logger when o has none, and the first of s's images the
// checkpoint pods' when o names none.
func (o Options) OpenExecutor(ctx context.Context, s executor.Shared, log hclog.Logger) (executor.Executor, error) {
	if o.CheckpointImage == "" && o.Image == "" && len(s.Images) > 0 {
		o.CheckpointImage = s.Images[0]
	}
	if o.StorageClass != "" || s.Retention > 0 {
		if err := s.Fill(nil, &o.Retention); err != nil {
			return nil, err
		}
	}
	if o.Logger == nil {
		o.Logger = log
	}
	return New(ctx, o)
}
