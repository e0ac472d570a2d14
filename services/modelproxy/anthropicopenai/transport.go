package anthropicopenai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRequestBody caps an Anthropic request body read by RoundTrip; the
// model proxy caps it lower before it gets here.
const maxRequestBody = 64 << 20

// RoundTrip answers POST .../v1/messages by calling the provider's
// /chat/completions, POST .../v1/messages/count_tokens with a local
// estimate, and HEAD or GET probes with 200. Anything else gets
// Anthropic's not_found_error. An error is returned only when the provider
// could not be reached; provider errors become Anthropic error responses.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var raw []byte
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBody+1))
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("anthropicopenai: reading the request body: %w", err)
		}
		raw = b
	}
	path := strings.TrimSuffix(req.URL.Path, "/")
	switch {
	case req.Method == http.MethodHead || req.Method == http.MethodGet && !strings.HasSuffix(path, "/v1/messages"):
		return newResponse(req, http.StatusOK, "text/plain", nil), nil
	case len(raw) > maxRequestBody:
		return errorResponse(req, http.StatusRequestEntityTooLarge, "request_too_large", "request body over 64 MiB"), nil
	case req.Method == http.MethodPost && strings.HasSuffix(path, "/v1/messages/count_tokens"):
		return t.countTokens(req, raw), nil
	case req.Method == http.MethodPost && strings.HasSuffix(path, "/v1/messages"):
		return t.messages(req, raw)
	}
	return errorResponse(req, http.StatusNotFound, "not_found_error",
		fmt.Sprintf("agentbox: %s %s has no OpenAI-compatible translation; only /v1/messages and /v1/messages/count_tokens do", req.Method, req.URL.Path)), nil
}

func (t *Transport) messages(req *http.Request, raw []byte) (*http.Response, error) {
	start := time.Now()
	tr, err := translateRequest(raw, t.opts)
	if err != nil {
		return errorResponse(req, http.StatusBadRequest, "invalid_request_error", "agentbox: "+err.Error()), nil
	}
	body, err := tr.body()
	if err != nil {
		return errorResponse(req, http.StatusBadRequest, "invalid_request_error", "agentbox: encoding the Chat Completions request: "+err.Error()), nil
	}
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, t.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("anthropicopenai: %w", err)
	}
	key := t.opts.APIKey
	if key == "" {
		key = req.Header.Get("X-Api-Key")
	}
	out.Header.Set("Content-Type", "application/json")
	if key != "" {
		out.Header.Set("Authorization", "Bearer "+key)
	}
	if tr.stream {
		out.Header.Set("Accept", "text/event-stream")
	} else {
		out.Header.Set("Accept", "application/json")
	}
	resp, err := t.rt.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("anthropicopenai: calling %s: %w", t.endpoint, err)
	}
	t.log.Debug("chat completions call", "status", resp.StatusCode, "stream", tr.stream, "model", tr.params.Model, "headers_after", time.Since(start))
	if resp.StatusCode/100 != 2 {
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return providerError(req, resp, b), nil
	}
	if tr.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		pr, pw := io.Pipe()
		go func() {
			defer func() { _ = resp.Body.Close() }()
			_ = pw.CloseWithError(translateStream(resp.Body, pw, tr.model, t.opts.ReasoningField, t.log))
		}()
		r := newResponse(req, http.StatusOK, "text/event-stream; charset=utf-8", nil)
		r.Body = pr
		r.ContentLength = -1
		r.Header.Set("Cache-Control", "no-cache")
		return r, nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
	if err != nil {
		return nil, fmt.Errorf("anthropicopenai: reading the provider's answer: %w", err)
	}
	msg, err := translateCompletion(b, tr.model, t.opts.ReasoningField)
	if err != nil {
		return errorResponse(req, http.StatusBadGateway, "api_error", "agentbox: the provider's answer is not a chat completion: "+err.Error()), nil
	}
	if tr.stream {
		// The provider ignored stream: true; replay the message as events.
		var buf bytes.Buffer
		writeMessageAsStream(&buf, msg)
		return newResponse(req, http.StatusOK, "text/event-stream; charset=utf-8", buf.Bytes()), nil
	}
	mb, _ := json.Marshal(msg)
	return newResponse(req, http.StatusOK, "application/json", mb), nil
}

// countTokens estimates the request's input tokens at about four bytes a
// token; the CLI uses the figure only to decide when to compact.
func (t *Transport) countTokens(req *http.Request, raw []byte) *http.Response {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return errorResponse(req, http.StatusBadRequest, "invalid_request_error", "agentbox: count_tokens body is not JSON: "+err.Error())
	}
	n := 0
	for _, k := range []string{"system", "messages", "tools"} {
		n += len(probe[k])
	}
	b, _ := json.Marshal(map[string]int{"input_tokens": EstimateTokens(n)})
	return newResponse(req, http.StatusOK, "application/json", b)
}

// EstimateTokens is the token estimate for n bytes of request JSON.
func EstimateTokens(n int) int { return max(1, (n+3)/4) }

func newResponse(req *http.Request, status int, contentType string, body []byte) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	if body != nil {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Request: req,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
}
