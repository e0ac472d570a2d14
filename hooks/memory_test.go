package hooks_test

import (
	"fmt"
	"testing"

	"github.com/agentbox/agentbox/hooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryStore(t *testing.T) {
	t.Run("get returns a copy", func(t *testing.T) {
		s := hooks.NewMemoryStore(0, 0)
		require.NoError(t, s.Set("k", []byte(`[1,2]`)))
		v, _ := s.Get("k")
		v[1] = '9'
		v2, _ := s.Get("k")
		assert.Equal(t, `[1,2]`, string(v2))
	})
	t.Run("invalid json refused", func(t *testing.T) {
		err := hooks.NewMemoryStore(0, 0).Set("k", []byte(`{`))
		assert.ErrorContains(t, err, "not a JSON document")
	})
	t.Run("key cap", func(t *testing.T) {
		s := hooks.NewMemoryStore(2, 0)
		require.NoError(t, s.Set("a", []byte(`1`)))
		require.NoError(t, s.Set("b", []byte(`1`)))
		assert.ErrorIs(t, s.Set("c", []byte(`1`)), hooks.ErrMemoryFull)
		assert.NoError(t, s.Set("a", []byte(`2`)), "overwriting is not a new key")
		s.Del("a")
		assert.NoError(t, s.Set("c", []byte(`1`)))
	})
	t.Run("byte cap counts overwrites once", func(t *testing.T) {
		s := hooks.NewMemoryStore(0, 10)
		require.NoError(t, s.Set("k", []byte(`"123456"`))) // 1 + 8 bytes
		require.NoError(t, s.Set("k", []byte(`"654321"`)))
		assert.ErrorIs(t, s.Set("k", []byte(`"12345678"`)), hooks.ErrMemoryFull)
		s.Del("k")
		s.Del("k")
		assert.NoError(t, s.Set("j", []byte(`"1234567"`)))
	})
}

func TestChatMemoryForgetsLeastRecentlyUsed(t *testing.T) {
	m := hooks.NewChatMemory(2, 0, 0)
	for i := range 2 {
		require.NoError(t, m.For("u", fmt.Sprint(i)).Set("k", []byte(`1`)))
	}
	m.For("u", "0")                                           // touch 0: 1 is now the oldest
	require.NoError(t, m.For("u", "2").Set("k", []byte(`1`))) // evicts 1
	_, ok := m.For("u", "0").Get("k")
	assert.True(t, ok)
	_, ok = m.For("u", "1").Get("k")
	assert.False(t, ok)
}
