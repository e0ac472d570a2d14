package local_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestQuotaPerFileOnly: what the local executor says at start-up about
// the workspace quota is what it does: no file past max_disk
// (RLIMIT_FSIZE), and no bound on the total.
func TestQuotaPerFileOnly(t *testing.T) {
	var logs testenv.SyncBuffer
	e := newExecutor(t, func(o *local.Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	})
	assert.Contains(t, logs.String(), "workspace quota: per file only")
	assert.Contains(t, logs.String(), "no file past max_disk (RLIMIT_FSIZE); the workspace's total and its number of files are not bounded")
	spec := testSpec("quota")
	spec.DiskBytes = 16 << 20
	sb := create(t, e, spec)
	out, stderr, _, err := run(t, sb, `cd /workspace; dd if=/dev/zero of=a bs=1M count=32 2>/dev/null; dd if=/dev/zero of=b bs=1M count=8 2>/dev/null; echo $(stat -c %s a) $(stat -c %s b)`)
	require.NoError(t, err, stderr)
	assert.Equal(t, "16777216 8388608", strings.TrimSpace(out), "a stops at max_disk; b passes the total")

	// A zero quota is the default, never none; a negative one is refused.
	sb0 := create(t, e, testSpec("quota-default"))
	out, stderr, _, err = run(t, sb0, `cat /proc/self/limits | grep "Max file size"`)
	require.NoError(t, err, stderr)
	assert.Contains(t, out, strconv.FormatInt(executor.DefaultDiskBytes, 10))
	spec = testSpec("quota-negative")
	spec.DiskBytes = -1
	_, err = e.Create(context.Background(), spec)
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.ErrorContains(t, err, "DiskBytes -1 is below the minimum of 16.0 MiB")
}
