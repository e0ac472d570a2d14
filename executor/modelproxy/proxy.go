package modelproxy

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
)

// DefaultMaxRequestBytes caps a request body when Options leave it 0.
const DefaultMaxRequestBytes = 32 << 20

// ErrBudgetExceeded is recorded (and answered to the CLI) when a request
// would go past the budget.
var ErrBudgetExceeded = errors.New("modelproxy: request budget exceeded")

// Budget bounds the model traffic of one gateway request. Zero fields are
// unlimited for that dimension; the middleware always sets them.
type Budget struct {
	// MaxRequests caps the number of calls forwarded upstream.
	MaxRequests int
	// MaxTokens caps the metered tokens (input + output + cache creation +
	// cache read) of finished calls; a call that starts below the cap runs
	// to its end, the next one is refused.
	MaxTokens int64
	// MaxDuration is the wall time from New; past it new calls are refused
	// and calls in flight are cut.
	MaxDuration time.Duration
}

// Options configure a Proxy.
type Options struct {
	// Upstream is the connector host's base URL (http or https); the
	// request path is appended to its path.
	Upstream string
	// APIKey is the connector's real key, sent upstream as x-api-key.
	APIKey string
	// Token is the per-request token the container presents.
	Token string
	// MaxRequestBytes caps one request body (DefaultMaxRequestBytes when 0);
	// larger requests get 413.
	MaxRequestBytes int64
	// Budget bounds this request's model traffic.
	Budget Budget
	// Logger receives one line per call (never keys or tokens).
	Logger hclog.Logger
	// Client supplies the transport and timeout for upstream calls
	// (http.DefaultTransport when nil). Redirects are never followed.
	Client *http.Client
}

// Call is one metered upstream call.
type Call struct {
	Status   int
	Usage    executor.Usage
	Model    string
	Duration time.Duration
	Stream   bool
	// Error is set when the call failed before or during the response
	// (upstream unreachable, stream cut); Status is then what the CLI got.
	Error string
}

// Proxy is the host-side model proxy of one sandbox.
type Proxy struct {
	opts     Options
	upstream *url.URL
	client   *http.Client
	log      hclog.Logger
	start    time.Time
	deadline time.Time // zero: none
	ctx      context.Context
	cancel   context.CancelFunc

	mu       sync.Mutex
	requests int
	usage    executor.Usage
	calls    []Call
	srv      *http.Server
	closed   bool
}

var _ http.Handler = (*Proxy)(nil)

// New validates o and returns a proxy; Serve starts it.
func New(o Options) (*Proxy, error) {
	u, err := url.Parse(o.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("modelproxy: upstream %q is not an http(s) URL; set the connector's host, e.g. https://api.anthropic.com", o.Upstream)
	}
	if o.APIKey == "" {
		return nil, errors.New("modelproxy: the connector has no API key; set one in the connector config")
	}
	if o.Token == "" {
		return nil, errors.New("modelproxy: empty per-request token; generate one per request")
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	c := &http.Client{
		Transport:     http.DefaultTransport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if o.Client != nil {
		if o.Client.Transport != nil {
			c.Transport = o.Client.Transport
		}
		c.Timeout = o.Client.Timeout
	}
	p := &Proxy{opts: o, upstream: u, client: c, log: o.Logger, start: time.Now()}
	if o.Budget.MaxDuration > 0 {
		p.deadline = p.start.Add(o.Budget.MaxDuration)
		p.ctx, p.cancel = context.WithDeadline(context.Background(), p.deadline)
	} else {
		p.ctx, p.cancel = context.WithCancel(context.Background())
	}
	return p, nil
}

// Serve answers on ln (the unix listener at {hostDir}/model.sock) until
// Close. It returns nil after Close.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("modelproxy: serve after close")
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	p.srv = srv
	p.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving and cuts calls in flight. Safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	srv := p.srv
	p.mu.Unlock()
	p.cancel()
	if srv != nil {
		return srv.Close()
	}
	return nil
}

// Usage returns the summed usage of the finished calls.
func (p *Proxy) Usage() executor.Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usage
}

// Calls returns the finished calls in the order they ended.
func (p *Proxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

// errorBody is Anthropic's error JSON shape.
type errorBody struct {
	Type  string      `json:"type"`
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorDetail{Type: typ, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Should-Retry", "false")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// presentedToken returns the key the client sent.
func presentedToken(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// reserve takes one request slot from the budget, or says why not.
func (p *Proxy) reserve(now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.opts.Budget
	switch {
	case !p.deadline.IsZero() && !now.Before(p.deadline):
		return fmt.Errorf("%w: the request's wall time of %s is used up", ErrBudgetExceeded, b.MaxDuration)
	case b.MaxRequests > 0 && p.requests >= b.MaxRequests:
		return fmt.Errorf("%w: %d of %d model calls made", ErrBudgetExceeded, p.requests, b.MaxRequests)
	case b.MaxTokens > 0 && totalTokens(p.usage) >= b.MaxTokens:
		return fmt.Errorf("%w: %d of %d tokens used", ErrBudgetExceeded, totalTokens(p.usage), b.MaxTokens)
	}
	p.requests++
	return nil
}

func totalTokens(u executor.Usage) int64 {
	return u.InputTokens + u.OutputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

func (p *Proxy) record(c Call) {
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.usage = p.usage.Add(c.Usage)
	p.mu.Unlock()
	p.log.Debug("model call", "status", c.Status, "model", c.Model, "stream", c.Stream,
		"duration", c.Duration, "input_tokens", c.Usage.InputTokens, "output_tokens", c.Usage.OutputTokens, "error", c.Error)
}

// hopHeaders are not forwarded either way; authHeaders never leave the
// proxy towards the upstream with the container's values.
var (
	hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}
	authHeaders = []string{"X-Api-Key", "Authorization", "Cookie", "Accept-Encoding", "Content-Length", "Host"}
)

// ServeHTTP checks the token and budget, then forwards one call.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if tok := presentedToken(r); subtle.ConstantTimeCompare([]byte(tok), []byte(p.opts.Token)) != 1 {
		if tok == "" {
			// Claude Code probes its base URL without a key before the
			// first call; that is not worth an operator's attention.
			p.log.Debug("model call without a token refused", "method", r.Method, "path", r.URL.Path)
		} else {
			p.log.Warn("model call refused: wrong token", "method", r.Method, "path", r.URL.Path)
		}
		writeError(w, http.StatusUnauthorized, "authentication_error", "agentbox: invalid sandbox token; the API key inside a sandbox is a per-request token set by agentbox")
		return
	}
	if r.ContentLength > p.opts.MaxRequestBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", tooLarge(p.opts.MaxRequestBytes))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.opts.MaxRequestBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "agentbox: reading the request body: "+err.Error())
		return
	}
	if int64(len(body)) > p.opts.MaxRequestBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", tooLarge(p.opts.MaxRequestBytes))
		return
	}
	call := Call{Model: gjson.GetBytes(body, "model").String(), Stream: gjson.GetBytes(body, "stream").Bool()}
	if err := p.reserve(start); err != nil {
		call.Status, call.Error, call.Duration = http.StatusForbidden, err.Error(), time.Since(start)
		p.record(call)
		writeError(w, http.StatusForbidden, "permission_error", "agentbox: "+err.Error()+"; the gateway's sandbox budget for this request is spent")
		return
	}

	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	unlink := context.AfterFunc(p.ctx, stop) // wall-time budget and Close cut the call
	defer unlink()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target(r.URL), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "agentbox: "+err.Error())
		return
	}
	copyHeaders(out.Header, r.Header, append(hopHeaders, authHeaders...))
	out.Header.Set("X-Api-Key", p.opts.APIKey)
	out.ContentLength = int64(len(body))

	resp, err := p.client.Do(out)
	if err != nil {
		call.Status, call.Error, call.Duration = http.StatusBadGateway, scrub(err.Error(), p.opts.APIKey), time.Since(start)
		p.record(call)
		msg := "agentbox: the model host is unreachable: " + call.Error
		if p.ctx.Err() != nil {
			msg = "agentbox: " + ErrBudgetExceeded.Error() + ": the request's wall time is used up"
		}
		writeError(w, http.StatusBadGateway, "api_error", msg)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	call.Status = resp.StatusCode
	copyHeaders(w.Header(), resp.Header, append(hopHeaders, "Content-Length"))
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)

	m := newMeter(strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			m.Write(buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				call.Error = "client went away: " + werr.Error()
				break
			}
			if fl != nil && m.sse {
				fl.Flush()
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				call.Error = "upstream stream cut: " + scrub(rerr.Error(), p.opts.APIKey)
			}
			break
		}
	}
	call.Usage = m.Usage()
	call.Duration = time.Since(start)
	p.record(call)
}

func tooLarge(n int64) string {
	return fmt.Sprintf("agentbox: request body over %d bytes; the sandbox's model proxy caps request size", n)
}

// target joins the upstream base with the request's path and query.
func (p *Proxy) target(in *url.URL) string {
	u := *p.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(in.Path, "/")
	u.RawPath = ""
	u.RawQuery = in.RawQuery
	return u.String()
}

func copyHeaders(dst, src http.Header, skip []string) {
	for k, vs := range src {
		drop := false
		for _, s := range skip {
			if strings.EqualFold(k, s) {
				drop = true
				break
			}
		}
		if !drop {
			dst[k] = append([]string(nil), vs...)
		}
	}
}

// scrub removes the key from a message, in case an error echoes a header.
func scrub(msg, key string) string {
	if key == "" {
		return msg
	}
	return strings.ReplaceAll(msg, key, "[redacted]")
}
