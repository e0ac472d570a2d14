package agentbox

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/kubernetes"
)

// TestExecutorChoiceErrors: a wrong Options.Executor and local mode
// without a helper fail before anything starts, saying what to set.
func TestExecutorChoiceErrors(t *testing.T) {
	ctx := context.Background()
	_, err := newExecutor(ctx, Options{Executor: "bwrap", DataDir: t.TempDir()}, hclog.NewNullLogger())
	assert.ErrorIs(t, err, config.ErrInvalid)
	assert.ErrorContains(t, err, "Options.Executor")

	_, err = newExecutor(ctx, Options{Executor: config.ExecutorLocal, DataDir: t.TempDir()}, hclog.NewNullLogger())
	assert.ErrorContains(t, err, "the local executor needs Options.HelperBinary")

	_, err = newExecutor(ctx, Options{Executor: config.ExecutorLocal, DataDir: t.TempDir(), HelperBinary: "/nonexistent/helper"}, hclog.NewNullLogger())
	assert.ErrorIs(t, err, executor.ErrUnavailable, "the local health check runs at start-up")
	assert.ErrorContains(t, err, "make helper")

	for _, kind := range []string{config.ExecutorLocal, config.ExecutorKubernetes} {
		_, err = newExecutor(ctx, Options{Executor: kind, DataDir: t.TempDir(), Pool: 1}, hclog.NewNullLogger())
		assert.ErrorContains(t, err, "Options.Pool is a Docker executor option", kind)
	}
}

// TestQuotaModeChoice: Options.Quota reaches the executor, and a mode the
// chosen executor cannot honour fails before anything starts, naming the
// option.
func TestQuotaModeChoice(t *testing.T) {
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"docker, not a mode": {o: Options{Quota: "prjquota"}, want: `Options.Quota "prjquota" is not a quota mode`},
		"local watchdog":     {o: Options{Executor: config.ExecutorLocal, HelperBinary: "/x", Quota: "watchdog"}, want: `Options.Quota "watchdog": the local executor caps each file at max_disk`},
		"local loop":         {o: Options{Executor: config.ExecutorLocal, HelperBinary: "/x", Quota: "loop"}, want: `Options.Quota "loop": the local executor`},
		"kubernetes loop":    {o: Options{Executor: config.ExecutorKubernetes, Quota: "loop"}, want: `Options.Quota "loop": the kubernetes executor enforces workspace quotas with the pod's helper only`},
		"kubernetes watchdog, watchdog off": {o: Options{Executor: config.ExecutorKubernetes, Quota: "watchdog", Kubernetes: kubernetes.Options{QuotaInterval: -1}},
			want: "Options.Kubernetes.QuotaInterval is negative"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.o.DataDir = t.TempDir()
			_, err := newExecutor(context.Background(), tc.o, hclog.NewNullLogger())
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
