package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseExecutor(t *testing.T) {
	for in, want := range map[string]string{"": ExecutorDocker, "docker": ExecutorDocker, "local": ExecutorLocal, "kubernetes": ExecutorKubernetes} {
		got, err := ParseExecutor(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"Docker", "bwrap", "local "} {
		_, err := ParseExecutor(bad)
		assert.ErrorIs(t, err, ErrInvalid, bad)
		assert.ErrorContains(t, err, `use "docker" (containers), "local" (bubblewrap, no container runtime) or "kubernetes" (pods)`, bad)
	}
}
