package openai

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/executor"
)

// TestResponseStoreBounds: the store keeps each user's responses apart,
// at most MaxResponsesPerUser of a user and MaxResponseBytes in all, each
// for ResponseTTL; the oldest go first.
func TestResponseStoreBounds(t *testing.T) {
	now := time.Unix(1763730000, 0)
	st := newResponseStore(Options{ResponseTTL: time.Hour, MaxResponsesPerUser: 3, MaxResponseBytes: 10 << 10, Now: func() time.Time { return now }})
	put := func(user, id string, body int) {
		st.put(&storedResponse{id: id, user: user, chat: "c", body: []byte(strings.Repeat("x", body)), created: now,
			history: []executor.Message{{Role: "user", Content: "hi"}}})
	}
	for i := range 4 {
		put("alice", fmt.Sprint("a", i), 10)
	}
	put("bob", "b0", 10)
	assert.Nil(t, st.get("alice", "a0"), "alice's oldest went first: at most 3 per user")
	for _, id := range []string{"a1", "a2", "a3"} {
		assert.NotNil(t, st.get("alice", id), id)
	}
	assert.Nil(t, st.get("bob", "a1"), "another user's id is unknown")
	assert.NotNil(t, st.get("bob", "b0"))

	put("carol", "c0", 9<<10)
	assert.LessOrEqual(t, st.bytes, int64(10<<10), "the bytes stay bounded")
	assert.NotNil(t, st.get("carol", "c0"))
	assert.Nil(t, st.get("alice", "a1"), "the oldest of all went first")
	put("carol", "huge", 11<<10)
	assert.Nil(t, st.get("carol", "huge"), "a response larger than the store is not kept")
	assert.NotNil(t, st.get("carol", "c0"), "and drops nothing")

	now = now.Add(time.Hour + time.Second)
	assert.Nil(t, st.get("carol", "c0"), "expired")
	assert.Zero(t, st.bytes)
	assert.Empty(t, st.users)
}
