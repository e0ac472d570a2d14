package scriptbook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type req struct {
	Received
	n int
}

func TestBookQueueThenScript(t *testing.T) {
	var b Book[string, req]
	_, ok := b.Next(&req{})
	assert.False(t, ok, "neither queue nor script")
	b.Enqueue("a", "b")
	assert.Equal(t, 2, b.Pending())
	b.SetScript(func(r *req) string { return "script" })
	for _, want := range []string{"a", "b", "script"} {
		got, ok := b.Next(&req{})
		require.True(t, ok)
		assert.Equal(t, want, got)
	}
	assert.Equal(t, 0, b.Pending())
}

func TestBookRecordNumbersInArrivalOrder(t *testing.T) {
	var b Book[string, req]
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &req{n: i}
			b.Record(r, &r.Seq)
		}()
	}
	wg.Wait()
	got := b.Requests()
	require.Len(t, got, 50)
	for i, r := range got {
		assert.Equal(t, i+1, r.Seq, "Seq is the position in Requests")
	}
}

func TestRead(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader("body"))
	r.Header.Set("x-api-key", "k1")
	got, err := Read(r, 10)
	require.NoError(t, err)
	assert.Equal(t, "k1", got.APIKey)
	assert.Equal(t, "/v1/messages", got.Path)
	assert.Equal(t, []byte("body"), got.Raw)

	r = httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("body"))
	r.Header.Set("Authorization", "Bearer k2")
	got, err = Read(r, 10)
	require.NoError(t, err)
	assert.Equal(t, "k2", got.APIKey)

	_, err = Read(httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(strings.Repeat("x", 11))), 10)
	assert.ErrorContains(t, err, "larger than")
}
