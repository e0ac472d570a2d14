// Package scriptbook is what the scripted model servers (internal/scriptedapi
// for Anthropic's Messages API, internal/scriptedopenai for OpenAI-compatible
// chat completions) share: the record of the requests they received and the
// turns a test scripted ahead, handed out in arrival order.
//
// Concurrency: a Book is safe for concurrent use.
package scriptbook

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Received is what a scripted server records of every request.
type Received struct {
	// Seq is the 1-based arrival number among all requests; At is when
	// its headers were in.
	Seq    int
	At     time.Time
	Method string
	Path   string
	Header http.Header
	// APIKey is the x-api-key header, or the bearer token of Authorization.
	APIKey string
	// Raw is the body as received.
	Raw []byte
}

// Read reads r's body, at most limit bytes, into a Received (Seq is set
// when the request is recorded). The error says the body is unreadable or
// too large.
func Read(r *http.Request, limit int64) (Received, error) {
	at := time.Now()
	raw, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err == nil && int64(len(raw)) > limit {
		err = fmt.Errorf("request body larger than %d bytes", limit)
	}
	if err != nil {
		return Received{}, err
	}
	return Received{At: at, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), APIKey: apiKey(r.Header), Raw: raw}, nil
}

// apiKey is the x-api-key header, else the bearer token of Authorization.
func apiKey(h http.Header) string {
	if k := h.Get("x-api-key"); k != "" {
		return k
	}
	a, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return a
}

// Book holds a server's queue of turns T, the script consulted when the
// queue is empty, and every request R received. The zero value is ready.
type Book[T, R any] struct {
	mu       sync.Mutex
	queue    []T
	script   func(*R) T
	requests []*R
	seq      int
}

// Enqueue appends turns: each request that needs one takes the next.
func (b *Book[T, R]) Enqueue(turns ...T) {
	b.mu.Lock()
	b.queue = append(b.queue, turns...)
	b.mu.Unlock()
}

// SetScript replaces the script consulted when the queue is empty.
func (b *Book[T, R]) SetScript(fn func(*R) T) {
	b.mu.Lock()
	b.script = fn
	b.mu.Unlock()
}

// Requests returns every request received so far, in arrival order.
func (b *Book[T, R]) Requests() []*R {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*R(nil), b.requests...)
}

// Pending is the number of enqueued turns not yet served.
func (b *Book[T, R]) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Record appends req, setting *seq (req's Received.Seq) to its 1-based
// arrival number under the Book's lock, so that Requests never sees it
// change.
func (b *Book[T, R]) Record(req *R, seq *int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	*seq = b.seq
	b.requests = append(b.requests, req)
}

// Next takes the next enqueued turn, or asks the script; ok is false when
// there is neither.
func (b *Book[T, R]) Next(req *R) (turn T, ok bool) {
	b.mu.Lock()
	if len(b.queue) > 0 {
		t := b.queue[0]
		b.queue = b.queue[1:]
		b.mu.Unlock()
		return t, true
	}
	script := b.script
	b.mu.Unlock()
	if script == nil {
		return turn, false
	}
	return script(req), true
}
