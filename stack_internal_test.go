package agentbox

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
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
