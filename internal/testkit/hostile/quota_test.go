package hostile_test

import (
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/hostile"
	"github.com/agentbox/agentbox/middleware"
)

// number extracts the integer after key= in out.
func number(t *testing.T, out, key string) int64 {
	t.Helper()
	m := regexp.MustCompile(key + `=([0-9]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "no %s= in %q", key, out)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n
}

// TestAttackDiskAndInodeFlood is finding 5 of issue 14: through the real
// CLI's Bash, the agent writes 4x its disk quota and floods files past its
// inode quota. Both stop at the quota inside the container (ENOSPC), the
// host holds at most the quota for the workspace, and the chat keeps
// working on the next turn. Without the quota (before this change) the
// whole 256 MiB and all 10000 files were written (the executor's own
// tests run that control: executor/docker TestQuota*/control_without_quota).
func TestAttackDiskAndInodeFlood(t *testing.T) {
	const disk, inodes = 64 << 20, 4000
	env := hostile.New(t, hostile.Options{Assistants: []hostile.Assistant{{
		Configure: func(a *middleware.Assistant) { a.Sandbox.Spec.DiskBytes, a.Sandbox.Spec.Inodes = disk, inodes },
	}}, Executor: func(o *docker.Options) { o.Quota = docker.QuotaLoop }})
	const chat = "flood"
	img := filepath.Join(env.DataDir, "quota", filepath.Base(env.Workspace(hostile.DefaultUser, chat))+".img")

	r1 := env.Run(t, hostile.Turn{Chat: chat, Steps: []hostile.Step{
		hostile.Bash(`dd if=/dev/zero of=big bs=1048576 count=256 2>&1; echo size=$(stat -c %s big)`),
	}})
	r1.RequireOK(t)
	require.True(t, r1.Steps[0].Ran)
	out := r1.Steps[0].Output
	assert.Contains(t, out, "No space left on device")
	size := number(t, out, "size")
	t.Logf("the agent wrote %d MiB of 256 under a %d MiB quota", size>>20, disk>>20)
	assert.Less(t, size, int64(disk))
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(img, &st))
	t.Logf("the workspace image holds %d MiB on the host", st.Blocks*512>>20)
	assert.LessOrEqual(t, st.Blocks*512, int64(disk), "the host keeps at most the quota for the workspace")

	r2 := env.Run(t, hostile.Turn{Chat: chat, Steps: []hostile.Step{
		hostile.Bash(`rm -f big; mkdir -p fl && cd fl && i=0; while [ $i -lt 10000 ]; do true > f$i 2>/dev/null || break; i=$((i+1)); done; echo made=$i`),
	}})
	r2.RequireOK(t)
	require.True(t, r2.Steps[0].Ran)
	made := number(t, r2.Steps[0].Output, "made")
	t.Logf("the agent created %d files of 10000 under an inode quota of %d", made, inodes)
	assert.Less(t, made, int64(inodes))
	assert.Greater(t, made, int64(inodes/2))

	r3 := env.Run(t, hostile.Turn{Chat: chat, Steps: []hostile.Step{hostile.Bash("rm -rf fl; echo still-alive")}})
	r3.RequireOK(t)
	assert.Contains(t, r3.Steps[0].Output, "still-alive", "a full workspace does not break the chat")
}
