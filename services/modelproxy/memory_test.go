package modelproxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unixClient dials sock for every request.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// TestBodyBudgetBoundsHeldBytes is finding 3 of issue 14: 16 concurrent
// 30 MiB bodies (4 sandboxes, 4 calls each) all succeed, while the body
// bytes the proxies hold (counted where the buffers are made and dropped)
// never exceed the gateway's 64 MiB budget.
func TestBodyBudgetBoundsHeldBytes(t *testing.T) {
	const sandboxes, perSB = 4, 4
	bodySize, budget := 30<<20, 64<<20
	if testing.Short() {
		bodySize, budget = 4<<20, 9<<20
	}
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	body := []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("a", bodySize-80) + `"}]}`)
	bodies := NewBodyBudget(int64(budget))
	var wg sync.WaitGroup
	statuses := make(chan int, sandboxes*perSB)
	for range sandboxes {
		p := newProxy(t, up.URL, func(o *Options) { o.Bodies = bodies; o.Model = "m" })
		c := unixClient(serveSock(t, p))
		for range perSB {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodPost, "http://sandbox/v1/messages", bytes.NewReader(body))
				if !assert.NoError(t, err) {
					return
				}
				req.Header.Set("X-Api-Key", testToken)
				resp, err := c.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				statuses <- resp.StatusCode
			})
		}
	}
	wg.Wait()
	close(statuses)
	n := 0
	for s := range statuses {
		assert.Equal(t, http.StatusOK, s)
		n++
	}
	require.Equal(t, sandboxes*perSB, n)
	assert.Equal(t, int64(sandboxes*perSB*len(body)), got.Load(), "every body reached the upstream whole")
	t.Logf("peak body bytes held: %d (%.1f MiB) for %d concurrent bodies of %.1f MiB; budget %d MiB",
		bodies.Peak(), float64(bodies.Peak())/(1<<20), sandboxes*perSB, float64(len(body))/(1<<20), budget>>20)
	assert.LessOrEqual(t, bodies.Peak(), int64(budget))
	assert.GreaterOrEqual(t, bodies.Peak(), int64(len(body)), "the counter saw the bodies")
	assert.Zero(t, bodies.Held(), "every reservation was given back")
}

// TestConcurrencyBoundPerSandbox: 8 calls at once from one sandbox reach
// the upstream at most MaxConcurrent (4) at a time; the rest wait and then
// succeed.
func TestConcurrencyBoundPerSandbox(t *testing.T) {
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inflight.Add(-1)
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(up.Close)
	p := newProxy(t, up.URL, nil)
	c := unixClient(serveSock(t, p))
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 2 * DefaultMaxConcurrent {
		wg.Go(func() {
			status, _ := post(t, c, map[string]string{"X-Api-Key": testToken}, jsonReq)
			if status == http.StatusOK {
				ok.Add(1)
			}
		})
	}
	require.Eventually(t, func() bool { return inflight.Load() == DefaultMaxConcurrent }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // room for a fifth call, were the bound broken
	assert.Equal(t, int64(DefaultMaxConcurrent), peak.Load())
	close(release)
	wg.Wait()
	assert.Equal(t, int64(2*DefaultMaxConcurrent), ok.Load())
	assert.Equal(t, int64(DefaultMaxConcurrent), peak.Load())
}

// TestSlowBodyGivesBackItsReservation: a sender that declares a body and
// stops sending is cut at BodyTimeout and its bytes go back to the budget.
func TestSlowBodyGivesBackItsReservation(t *testing.T) {
	rec := newRecorder(t)
	bodies := NewBodyBudget(1 << 20)
	p := newProxy(t, rec.URL, func(o *Options) { o.Bodies = bodies; o.BodyTimeout = 200 * time.Millisecond })
	sock := serveSock(t, p)
	conn, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = io.WriteString(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+testToken+"\r\nContent-Length: 1000000\r\n\r\n{\"model\":")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return bodies.Held() == 1_000_000 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return bodies.Held() == 0 }, 10*time.Second, 10*time.Millisecond, "the stalled body is dropped")
	assert.Empty(t, rec.take())
}

// TestWaitEndsAtWallTime: a call queued behind the sandbox's concurrency
// bound is answered with the budget refusal when the wall time runs out,
// not left waiting.
func TestWaitEndsAtWallTime(t *testing.T) {
	up := newUpstream(t)
	up.release = make(chan struct{}) // never released: the first call holds the slot
	p := newProxy(t, up.URL, func(o *Options) { o.MaxConcurrent = 1; o.Budget.MaxDuration = 500 * time.Millisecond })
	c := unixClient(serveSock(t, p))
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = post(t, c, map[string]string{"X-Api-Key": testToken}, `{"stream":true}`)
	}()
	require.Eventually(t, func() bool { return up.hits.Load() == 1 }, 5*time.Second, time.Millisecond)
	status, body := post(t, c, map[string]string{"X-Api-Key": testToken}, jsonReq)
	assert.Equal(t, http.StatusForbidden, status, body)
	assert.Contains(t, body, "wall time")
	assert.Equal(t, int64(1), up.hits.Load(), "the queued call never reached the upstream")
	<-first
}
