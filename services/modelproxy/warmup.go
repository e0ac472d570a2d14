package modelproxy

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// WarmUp answers a waiting CLI's warm-up call: a model call the CLI makes
// before its request's message arrives (Claude Code's side question), so
// that the work of building a call is done and the message's own first
// call leaves sooner. It is served on the sandbox's model socket between
// requests, where the request's Proxy serves during one. It accepts the
// token alone, on POST /v1/messages only; it drops the body as it arrives
// (at most the limit given to NewWarmUp) and answers every call itself
// with a short canned message, streamed: nothing is forwarded, metered or
// billed. Its answers close their connection, so that the CLI opens a new
// one to the request's Proxy. It is safe for concurrent use.
type WarmUp struct {
	token   string
	maxBody int64
	calls   atomic.Int64
	server  socketServer
}

// WarmUpReply is the text of every warm-up answer.
const WarmUpReply = "ok"

// NewWarmUp returns a WarmUp that accepts token and bodies of at most
// maxBody bytes (DefaultMaxRequestBytes when maxBody <= 0).
func NewWarmUp(token string, maxBody int64) (*WarmUp, error) {
	if token == "" {
		return nil, errors.New("modelproxy: the warm-up needs the sandbox's token")
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxRequestBytes
	}
	return &WarmUp{token: token, maxBody: maxBody}, nil
}

// Calls is how many warm-up calls were answered.
func (w *WarmUp) Calls() int { return int(w.calls.Load()) }

// Serve answers on ln until Close; it returns nil after Close.
func (w *WarmUp) Serve(ln net.Listener) error { return w.server.serve(ln, w) }

// Close stops serving and cuts calls in flight. Safe to call more than once.
func (w *WarmUp) Close() error { return w.server.close() }

// ServeHTTP checks the token and the endpoint and answers the call.
func (w *WarmUp) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Connection", "close")
	if subtle.ConstantTimeCompare([]byte(presentedToken(r)), []byte(w.token)) != 1 {
		messagesSpec.writeError(rw, http.StatusUnauthorized, "authentication_error", "agentbox: invalid sandbox token; the API key inside a sandbox is a per-request token set by agentbox")
		return
	}
	if path, _, f := messagesSpec.endpoint(r); f != nil || path != PathMessages {
		messagesSpec.writeError(rw, http.StatusForbidden, "permission_error", "agentbox: between requests the sandbox's model route answers only the CLI's warm-up message call")
		return
	}
	// Dropped as it arrives: warm-ups of many kept containers at once
	// must not hold their bodies (whole conversations) in memory.
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(rw, r.Body, w.maxBody)); err != nil {
		messagesSpec.writeError(rw, http.StatusRequestEntityTooLarge, "request_too_large", "agentbox: the warm-up call's body is too large")
		return
	}
	w.calls.Add(1)
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Content-Length", strconv.Itoa(len(warmUpStream)))
	_, _ = rw.Write(warmUpStream)
}

// warmUpModel is the model the canned answer names.
const warmUpModel = "agentbox-warm-up"

// warmUpStream is the canned answer, a Messages API event stream (the CLI
// always streams).
var warmUpStream = func() []byte {
	message := map[string]any{
		"id": "msg_agentbox_warm_up", "type": "message", "role": "assistant", "model": warmUpModel,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 0, "output_tokens": 0},
	}
	events := []struct {
		name string
		data any
	}{
		{"message_start", map[string]any{"type": "message_start", "message": message}},
		{"content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": WarmUpReply}}},
		{"content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}},
		{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 0}}},
		{"message_stop", map[string]any{"type": "message_stop"}},
	}
	var out []byte
	for _, e := range events {
		b, err := json.Marshal(e.data)
		if err != nil {
			panic(err)
		}
		out = fmt.Appendf(out, "event: %s\ndata: %s\n\n", e.name, b)
	}
	return out
}()
