package openairesponses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// maxRequestBody caps a request body and one line of an upstream stream;
// the model proxy caps requests lower before they get here.
const maxRequestBody = 64 << 20

// dialect is what differs between the upstream APIs.
type dialect interface {
	name() string
	body(r *request) ([]byte, error)
	headers(h http.Header, key string)
	model(r *request) string
	stream(body io.Reader, w *writer) error
	whole(body []byte, w *writer) (map[string]any, error)
	// key is the configured key ("" to take the incoming bearer token).
	key() string
	// error turns an upstream error answer into the Responses API's code
	// and message.
	error(status int, body []byte) (code, msg string)
}

// Transport answers POST .../responses calls of the Responses API from an
// upstream that speaks another API (NewChat, NewMessages).
type Transport struct {
	d        dialect
	endpoint string
	rt       http.RoundTripper
	log      hclog.Logger
}

var _ http.RoundTripper = (*Transport)(nil)

func newTransport(d dialect, endpoint string, rt http.RoundTripper, log hclog.Logger) *Transport {
	if rt == nil {
		rt = http.DefaultTransport
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Transport{d: d, endpoint: endpoint, rt: rt, log: log}
}

// RoundTrip answers POST .../responses with the upstream's answer
// translated (a stream of events, or the response object); anything else
// gets a 404 in OpenAI's error shape. An error is returned only when the
// upstream could not be reached; its error answers become OpenAI errors
// with the same status, coded so that the CLI tells a context overflow
// (not retried) from the rest (retried).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var raw []byte
	if req.Body != nil {
		// Sized by Content-Length (up to 1 MiB, which a false one costs
		// at most), a 64 KB body is read without regrowing the buffer.
		buf := bytes.NewBuffer(make([]byte, 0, min(max(req.ContentLength, 0), 1<<20)+bytes.MinRead))
		_, err := buf.ReadFrom(io.LimitReader(req.Body, maxRequestBody+1))
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("openairesponses: reading the request body: %w", err)
		}
		raw = buf.Bytes()
	}
	switch {
	case req.Method != http.MethodPost || !strings.HasSuffix(strings.TrimSuffix(req.URL.Path, "/"), "/responses"):
		return errorResponse(req, http.StatusNotFound, "not_found", fmt.Sprintf("agentbox: %s %s has no %s translation; only POST /responses does", req.Method, req.URL.Path, t.d.name())), nil
	case len(raw) > maxRequestBody:
		return errorResponse(req, http.StatusRequestEntityTooLarge, "request_too_large", "agentbox: request body over 64 MiB"), nil
	}
	start := time.Now()
	r, err := decodeRequest(raw)
	if err == nil {
		raw, err = t.d.body(r)
	}
	if err != nil {
		return errorResponse(req, http.StatusBadRequest, "invalid_request_error", "agentbox: translating to "+t.d.name()+": "+err.Error()), nil
	}
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, t.endpoint, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("openairesponses: %w", err)
	}
	key := t.d.key()
	if key == "" {
		key, _ = strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Accept", map[bool]string{true: "text/event-stream", false: "application/json"}[r.stream])
	t.d.headers(out.Header, key)
	resp, err := t.rt.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("openairesponses: calling %s: %w", t.endpoint, err)
	}
	t.log.Debug("translated call", "api", t.d.name(), "status", resp.StatusCode, "stream", r.stream, "model", t.d.model(r), "headers_after", time.Since(start))
	if resp.StatusCode/100 != 2 {
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		code, msg := t.d.error(resp.StatusCode, b)
		er := errorResponse(req, resp.StatusCode, code, msg)
		for _, h := range []string{"Retry-After", "Retry-After-Ms"} {
			if v := resp.Header.Get(h); v != "" {
				er.Header.Set(h, v)
			}
		}
		return er, nil
	}
	if r.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		pr, pw := io.Pipe()
		go func() {
			defer func() { _ = resp.Body.Close() }()
			w := newWriter(pw, nil, t.d.model(r), r.names)
			_ = pw.CloseWithError(t.d.stream(resp.Body, w))
		}()
		out := newResponse(req, http.StatusOK, "text/event-stream; charset=utf-8", nil)
		out.Body, out.ContentLength = pr, -1
		out.Header.Set("Cache-Control", "no-cache")
		return out, nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
	if err != nil {
		return nil, fmt.Errorf("openairesponses: reading the provider's answer: %w", err)
	}
	if r.stream {
		// The upstream ignored stream: true; replay its answer as events.
		var buf bytes.Buffer
		if _, err := t.d.whole(b, newWriter(&buf, nil, t.d.model(r), r.names)); err != nil {
			return errorResponse(req, http.StatusBadGateway, "server_error", "agentbox: "+err.Error()), nil
		}
		return newResponse(req, http.StatusOK, "text/event-stream; charset=utf-8", buf.Bytes()), nil
	}
	obj, err := t.d.whole(b, newWriter(nil, nil, t.d.model(r), r.names))
	if err != nil {
		return errorResponse(req, http.StatusBadGateway, "server_error", "agentbox: "+err.Error()), nil
	}
	ob, _ := json.Marshal(obj)
	return newResponse(req, http.StatusOK, "application/json", ob), nil
}

// newResponse is a response to req.
func newResponse(req *http.Request, status int, contentType string, body []byte) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	if body != nil {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req}
}

// errorResponse is an error answer in OpenAI's shape.
func errorResponse(req *http.Request, status int, code, msg string) *http.Response {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": errorType(status), "param": nil, "code": code}})
	return newResponse(req, status, "application/json", b)
}

// errorType is OpenAI's error type for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// chatDialect is Chat Completions.
type chatDialect struct{ o ChatOptions }

func (d chatDialect) name() string                           { return "Chat Completions" }
func (d chatDialect) body(r *request) ([]byte, error)        { return chatBody(r, d.o) }
func (d chatDialect) model(r *request) string                { return cmpOr(d.o.Model, r.model) }
func (d chatDialect) key() string                            { return d.o.APIKey }
func (d chatDialect) stream(body io.Reader, w *writer) error { return chatStream(body, w, d.o) }
func (d chatDialect) headers(h http.Header, key string)      { setBearer(h, key) }
func (d chatDialect) error(s int, b []byte) (string, string) { return openaiError(s, b) }
func (d chatDialect) whole(b []byte, w *writer) (map[string]any, error) {
	return chatCompletion(b, w, d.o)
}

// messagesDialect is Anthropic's Messages API.
type messagesDialect struct{ o MessagesOptions }

func (d messagesDialect) name() string                           { return "Messages" }
func (d messagesDialect) body(r *request) ([]byte, error)        { return messagesBody(r, d.o) }
func (d messagesDialect) model(r *request) string                { return cmpOr(d.o.Model, r.model) }
func (d messagesDialect) key() string                            { return d.o.APIKey }
func (d messagesDialect) stream(body io.Reader, w *writer) error { return messagesStream(body, w) }
func (d messagesDialect) error(s int, b []byte) (string, string) { return anthropicError(s, b) }
func (d messagesDialect) whole(b []byte, w *writer) (map[string]any, error) {
	return messagesMessage(b, w)
}

// anthropicVersion is the Messages API version the requests are written
// for.
const anthropicVersion = "2023-06-01"

func (d messagesDialect) headers(h http.Header, key string) {
	h.Set("Anthropic-Version", anthropicVersion)
	if key != "" {
		h.Set("X-Api-Key", key)
	}
}

// setBearer sends key as a bearer token.
func setBearer(h http.Header, key string) {
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
}
