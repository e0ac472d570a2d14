// Package scriptbook is what the scripted model servers (internal/scriptedapi
// for Anthropic's Messages API, internal/scriptedopenai for OpenAI-compatible
// chat completions) share: the record of the requests they received and the
// turns a test scripted ahead, handed out in arrival order.
//
// Concurrency: a Book is safe for concurrent use.
package scriptbook

import (
	"bytes"
	"encoding/json"
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

// Split cuts s into up to n pieces (3 when n <= 0) on byte boundaries that
// keep UTF-8 characters whole, so that clients see several deltas.
func Split(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n <= 0 {
		n = 3
	}
	step := max(1, (len(s)+n-1)/n)
	var parts []string
	for len(s) > 0 {
		k := min(step, len(s))
		for k < len(s) && s[k]&0xC0 == 0x80 {
			k++
		}
		parts = append(parts, s[:k])
		s = s[k:]
	}
	return parts
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// DecodeList decodes data, a JSON list of T or a JSON string that stands
// for the one element of(s) (APIs accept both for content), or null (nil).
func DecodeList[T any](data []byte, of func(string) T) ([]T, error) {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		return nil, nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, err
		}
		return []T{of(s)}, nil
	}
	var list []T
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("neither a string nor a list: %w", err)
	}
	return list, nil
}
