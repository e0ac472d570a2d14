package executortest

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// RunSpecTable checks that a backend's plan function (a Spec in, the
// Spec it would run out) takes executor's table: a Spec with only its
// ids gets the table's defaults, and each value out of the table's bounds
// is refused with executor.Normalize's own message, which names the field
// and its option. Every backend runs it on its plan, so a default or
// bound of its own fails here.
func RunSpecTable(t *testing.T, plan func(executor.Spec) (executor.Spec, error)) {
	t.Helper()
	base := executor.Spec{UserID: "u", ChatID: "c"}
	t.Run("defaults", func(t *testing.T) {
		got, err := plan(base)
		require.NoError(t, err)
		assert.Equal(t, executor.DefaultMemoryBytes, got.MemoryBytes)
		assert.Equal(t, executor.DefaultCPUs, got.CPUs)
		assert.Equal(t, executor.DefaultPidsLimit, got.PidsLimit)
		assert.Equal(t, executor.DefaultTimeout, got.Timeout)
		assert.Equal(t, executor.DefaultLeaseWait, got.LeaseWait)
		assert.Equal(t, executor.DefaultDiskBytes, got.DiskBytes)
		assert.Equal(t, executor.DefaultInodes, got.Inodes)
		assert.Equal(t, executor.DefaultNetwork, got.Network)
		assert.Equal(t, executor.DefaultUser, got.User)
	})
	for name, set := range map[string]func(*executor.Spec){
		"memory negative":        func(s *executor.Spec) { s.MemoryBytes = -1 },
		"memory below minimum":   func(s *executor.Spec) { s.MemoryBytes = executor.MinMemoryBytes - 1 },
		"cpus negative":          func(s *executor.Spec) { s.CPUs = -1 },
		"cpus below minimum":     func(s *executor.Spec) { s.CPUs = executor.MinCPUs / 2 },
		"cpus above maximum":     func(s *executor.Spec) { s.CPUs = executor.MaxCPUs + 1 },
		"cpus NaN":               func(s *executor.Spec) { s.CPUs = math.NaN() },
		"pids negative":          func(s *executor.Spec) { s.PidsLimit = -1 },
		"pids below minimum":     func(s *executor.Spec) { s.PidsLimit = executor.MinPidsLimit - 1 },
		"pids above maximum":     func(s *executor.Spec) { s.PidsLimit = executor.MaxPidsLimit + 1 },
		"timeout negative":       func(s *executor.Spec) { s.Timeout = -time.Second },
		"timeout below minimum":  func(s *executor.Spec) { s.Timeout = executor.MinTimeout - time.Millisecond },
		"lease wait negative":    func(s *executor.Spec) { s.LeaseWait = -time.Second },
		"disk negative":          func(s *executor.Spec) { s.DiskBytes = -1 },
		"disk below minimum":     func(s *executor.Spec) { s.DiskBytes = executor.MinDiskBytes - 1 },
		"inodes negative":        func(s *executor.Spec) { s.Inodes = -1 },
		"inodes below minimum":   func(s *executor.Spec) { s.Inodes = executor.MinInodes - 1 },
		"inodes above maximum":   func(s *executor.Spec) { s.DiskBytes, s.Inodes = 1<<42, executor.MaxInodes+1 },
		"inodes past disk":       func(s *executor.Spec) { s.DiskBytes, s.Inodes = executor.MinDiskBytes, executor.MinDiskBytes/1024+1 },
		"network host":           func(s *executor.Spec) { s.Network = "host" },
		"network of a container": func(s *executor.Spec) { s.Network = "container:abc" },
		"env without equals":     func(s *executor.Spec) { s.Env = []string{"FOO"} },
		"bad chat id":            func(s *executor.Spec) { s.ChatID = "../x" },
	} {
		t.Run(name, func(t *testing.T) {
			spec := base
			set(&spec)
			_, want := executor.Normalize(spec)
			require.Error(t, want, "the table refuses it")
			_, err := plan(spec)
			require.ErrorIs(t, err, executor.ErrInvalid)
			assert.Contains(t, err.Error(), want.Error(), "refused with the table's message")
		})
	}
}
