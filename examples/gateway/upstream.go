package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/config"
)

// maxPlainBody bounds a plain chat request's body, as the adapter bounds
// its own.
const maxPlainBody = 32 << 20

// upstream is the gateway's own chat completions path, the handler that
// agentbox's middleware sits in front of: a reverse proxy that answers a
// plain assistant (no sandbox block; it is given no other) from its
// connector's OpenAI-compatible chat completions API. For an openai
// connector that is its host; for an
// anthropic one it is Anthropic's OpenAI SDK compatibility endpoint
// ({host}/v1/chat/completions), which takes the key as a bearer token. The
// request goes upstream as the client sent it (streamed or not, every
// parameter kept) with two changes: "model" becomes the connector's model
// and the assistant's prompts.yml messages go first. The client's own
// headers (its credentials among them) stay here; the connector's key is
// the only credential sent. The answer, usage included, streams back
// unchanged.
type upstream struct {
	assistants map[string]*config.Assistant
	proxy      *httputil.ReverseProxy
	log        hclog.Logger
}

// target is where one request goes: set by ServeHTTP, read by rewrite.
type target struct {
	url *url.URL
	key string
}

// targetKey is the request context key of a target.
type targetKey struct{}

// newUpstream returns the plain path for assistants, logging through log.
func newUpstream(assistants map[string]*config.Assistant, log hclog.Logger) *upstream {
	u := &upstream{assistants: assistants, log: log}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = upstreamTimeout
	u.proxy = &httputil.ReverseProxy{
		Rewrite:   u.rewrite,
		Transport: tr,
		// Stream each chunk as it comes: a streamed answer is SSE.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t, _ := r.Context().Value(targetKey{}).(target)
			u.log.Warn("the connector did not answer", "url", t.url, "error", err)
			writeOpenAIError(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("the model API at %s did not answer: %v", t.url.Redacted(), err))
		},
	}
	return u
}

// ServeHTTP answers POST /v1/chat/completions for the plain assistants and
// 404 for everything else (agentbox's middleware in front serves the
// sandboxed assistants, their stored responses and /v1/models).
func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		writeOpenAIError(w, http.StatusNotFound, "not_found", notFound(r))
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxPlainBody+1))
	if err != nil || len(raw) > maxPlainBody {
		writeOpenAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request body is unreadable or larger than %d MiB", maxPlainBody>>20))
		return
	}
	body, t, status, err := u.prepare(raw)
	if err != nil {
		writeOpenAIError(w, status, "invalid_request_error", err.Error())
		return
	}
	out := r.WithContext(context.WithValue(r.Context(), targetKey{}, t))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	u.proxy.ServeHTTP(w, out)
}

// prepare rewrites a chat request for the assistant it names and says
// where it goes; a failure comes with the status to answer.
func (u *upstream) prepare(raw []byte) ([]byte, target, int, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, target{}, http.StatusBadRequest, fmt.Errorf("the request body is not a JSON object: %w", err)
	}
	var model string
	if err := json.Unmarshal(req["model"], &model); err != nil || model == "" {
		return nil, target{}, http.StatusBadRequest, errors.New(`"model" must be a string naming an assistant; GET /v1/models lists them`)
	}
	a := u.assistants[model]
	if a == nil {
		return nil, target{}, http.StatusNotFound, fmt.Errorf("the model %q does not exist; GET /v1/models lists them", model)
	}
	c := a.Connector
	if c == nil {
		return nil, target{}, http.StatusInternalServerError, fmt.Errorf("assistant %q has no connector; set \"connector\" in %s", a.ID, a.File)
	}
	var base string
	switch c.Type {
	case config.ConnectorOpenAI:
		base = c.Host
	case config.ConnectorAnthropic:
		base = c.Host + "/v1"
	default:
		return nil, target{}, http.StatusInternalServerError, fmt.Errorf("assistant %q: connector %q has type %q, which only a sandboxed assistant can use; give it an anthropic or openai connector", a.ID, c.ID, c.Type)
	}
	to, err := url.Parse(base + "/chat/completions")
	if err != nil {
		return nil, target{}, http.StatusInternalServerError, fmt.Errorf("connector %q: host %q: %w", c.ID, c.Host, err)
	}
	var msgs []json.RawMessage
	if m, ok := req["messages"]; ok {
		if err := json.Unmarshal(m, &msgs); err != nil {
			return nil, target{}, http.StatusBadRequest, fmt.Errorf(`"messages" must be a list of messages: %w`, err)
		}
	}
	prompts := make([]json.RawMessage, 0, len(a.Prompts)+len(msgs))
	for _, p := range a.Prompts {
		m, err := json.Marshal(map[string]string{"role": p.Role, "content": p.Content})
		if err != nil {
			return nil, target{}, http.StatusInternalServerError, err
		}
		prompts = append(prompts, m)
	}
	req["model"] = json.RawMessage(strconv.Quote(c.Model))
	if req["messages"], err = json.Marshal(append(prompts, msgs...)); err != nil {
		return nil, target{}, http.StatusInternalServerError, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, target{}, http.StatusInternalServerError, err
	}
	return body, target{url: to, key: c.Key.Reveal()}, 0, nil
}

// rewrite points the outbound request at its target with only the
// headers the API needs: none of the client's reach the connector.
func (u *upstream) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.Out.URL = t.url
	pr.Out.Host = ""
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if a := pr.In.Header.Get("Accept"); a != "" {
		h.Set("Accept", a)
	}
	h.Set("Authorization", "Bearer "+t.key)
	h.Set("User-Agent", "agentbox-example-gateway")
	pr.Out.Header = h
}

// writeOpenAIError answers with OpenAI's error JSON.
func writeOpenAIError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": nil}})
}

// describe names a connector for log lines.
func describe(c *config.Connector) string {
	return fmt.Sprintf("%s (%s %s, model %s)", c.ID, c.Type, c.Host, c.Model)
}

// upstreamTimeout bounds how long the proxy waits for the connector's
// response headers; a streamed answer may then run as long as it runs.
const upstreamTimeout = 5 * time.Minute

// notFound says why nothing answers r here: the middleware in front
// passes on what it does not serve, another user's stored response
// included, which must read as one that does not exist.
func notFound(r *http.Request) string {
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/responses/"); ok && r.Method == http.MethodGet {
		return fmt.Sprintf("there is no stored response %q for this user; a response is kept for the user it answered", id)
	}
	return fmt.Sprintf("no route for %s %s; plain assistants answer on POST /v1/chat/completions, sandboxed ones on POST /v1/chat/completions, /v1/responses and /v1/messages, and GET /v1/models lists them", r.Method, r.URL.Path)
}
