package modelproxy

import (
	"context"
	"crypto/subtle"
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
	"golang.org/x/sync/semaphore"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of Options.
const (
	// DefaultMaxRequestBytes caps a request body.
	DefaultMaxRequestBytes = 32 << 20
	// DefaultMaxConcurrent bounds one sandbox's model calls in flight.
	DefaultMaxConcurrent = 4
	// DefaultBodyTimeout bounds reading one request body.
	DefaultBodyTimeout = 30 * time.Second
)

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
	// Model is the connector's model: a request naming another model (not
	// in AllowedModels) is rewritten to it. Empty leaves the model as sent,
	// unless AllowedModels is set, which then must hold it.
	Model string
	// AllowedModels are further models a request may name as it is.
	AllowedModels []string
	// MaxOutputTokens caps a Messages call's max_tokens (a larger or
	// missing value is set to it); 0 is DefaultMaxOutputTokens, negative
	// leaves max_tokens as sent.
	MaxOutputTokens int64
	// MaxConcurrent bounds this sandbox's calls in flight; more wait
	// (DefaultMaxConcurrent when 0).
	MaxConcurrent int
	// Bodies is the gateway's request-body byte budget, shared by all its
	// proxies (a budget of DefaultBodyBudget for this proxy alone when nil).
	Bodies *BodyBudget
	// BodyTimeout bounds reading one request body (DefaultBodyTimeout when
	// 0): a slow sender must not hold its byte reservation.
	BodyTimeout time.Duration
	// API is the model API the proxy serves (APIMessages when empty): its
	// endpoints, body fields, headers, error shape and usage.
	API API
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
	api      *apiSpec
	upstream *url.URL
	client   *http.Client
	log      hclog.Logger
	start    time.Time
	deadline time.Time // zero: none
	ctx      context.Context
	cancel   context.CancelFunc

	slots  chan struct{}       // calls in flight
	bodies *semaphore.Weighted // this sandbox's body bytes in flight

	mu       sync.Mutex
	active   int           // ServeHTTP calls running
	idle     chan struct{} // closed when active drops to 0 (Idle waits on it)
	requests int
	stopped  string // the budget that first refused a call
	usage    executor.Usage
	calls    []Call

	server socketServer
}

var _ http.Handler = (*Proxy)(nil)

// New validates o and returns a proxy; Serve starts it.
func New(o Options) (*Proxy, error) {
	u, err := url.Parse(o.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("modelproxy: upstream %q is not an http(s) URL; set the connector's host, e.g. https://api.anthropic.com", o.Upstream)
	}
	api, err := specOf(o.API)
	if err != nil {
		return nil, err
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
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.Bodies == nil {
		o.Bodies = NewBodyBudget(0)
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
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
	p := &Proxy{opts: o, api: api, upstream: u, client: c, log: o.Logger, start: time.Now(),
		slots: make(chan struct{}, o.MaxConcurrent), bodies: semaphore.NewWeighted(o.MaxRequestBytes)}
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
func (p *Proxy) Serve(ln net.Listener) error { return p.server.serve(ln, p) }

// Close stops serving and cuts calls in flight. Safe to call more than once.
func (p *Proxy) Close() error {
	p.cancel()
	return p.server.close()
}

// Idle waits until no call is in flight, so that Usage holds every call
// whose response the agent has read: a call is metered once its
// upstream body has ended, which may be just after its last bytes reached
// the agent. It returns ctx's error if ctx ends first.
func (p *Proxy) Idle(ctx context.Context) error {
	p.mu.Lock()
	if p.active == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enter and leave count the calls Idle waits for.
func (p *Proxy) enter() {
	p.mu.Lock()
	p.active++
	p.mu.Unlock()
}

func (p *Proxy) leave() {
	p.mu.Lock()
	if p.active--; p.active == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
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
		p.stoppedBy(BudgetWall)
		return fmt.Errorf("%w: the request's wall time of %s is used up", ErrBudgetExceeded, b.MaxDuration)
	case b.MaxRequests > 0 && p.requests >= b.MaxRequests:
		p.stoppedBy(BudgetCalls)
		return fmt.Errorf("%w: %d of %d model calls made", ErrBudgetExceeded, p.requests, b.MaxRequests)
	case b.MaxTokens > 0 && totalTokens(p.usage) >= b.MaxTokens:
		p.stoppedBy(BudgetTokens)
		return fmt.Errorf("%w: %d of %d tokens used", ErrBudgetExceeded, totalTokens(p.usage), b.MaxTokens)
	}
	p.requests++
	return nil
}

// The budgets BudgetStop names.
const (
	BudgetCalls  = "calls"
	BudgetTokens = "tokens"
	BudgetWall   = "wall"
)

// stoppedBy records that budget refused a call, unless one already did;
// p.mu is held.
func (p *Proxy) stoppedBy(budget string) {
	if p.stopped == "" {
		p.stopped = budget
	}
}

// wallSpent records a call cut or refused because the wall time ran out
// (not because the proxy was closed) and reports whether it was.
func (p *Proxy) wallSpent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deadline.IsZero() || time.Now().Before(p.deadline) {
		return false
	}
	p.stoppedBy(BudgetWall)
	return true
}

// BudgetStop names the budget (BudgetCalls, BudgetTokens or BudgetWall)
// that first refused or cut a call of this proxy, or "" when none did.
func (p *Proxy) BudgetStop() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
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

// ServeHTTP checks the token, the endpoint and the budget, then forwards
// one call: the body is read under the byte budgets, its model and
// max_tokens pinned, and only allowlisted headers pass either way.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.enter()
	defer p.leave()
	start := time.Now()
	if tok := presentedToken(r); subtle.ConstantTimeCompare([]byte(tok), []byte(p.opts.Token)) != 1 {
		if tok == "" {
			// Claude Code probes its base URL without a key (HEAD /)
			// before the first call; that is not worth an operator's
			// attention.
			p.log.Debug("model call without a token refused", "method", r.Method, "uri", p.uri(r))
		} else {
			p.log.Warn("model call refused: wrong token", "method", r.Method, "uri", p.uri(r))
		}
		p.api.writeError(w, http.StatusUnauthorized, "authentication_error", "agentbox: invalid sandbox token; the API key inside a sandbox is a per-request token set by agentbox")
		return
	}
	path, query, f := p.api.endpoint(r)
	if f == nil {
		f = p.checkLength(r)
	}
	if f != nil {
		p.refuse(w, r, f)
		return
	}
	// Waiting for a slot or for bytes ends with the client, the wall-time
	// budget or Close.
	wait, cancelWait := context.WithCancel(r.Context())
	defer cancelWait()
	defer context.AfterFunc(p.ctx, cancelWait)()
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	case <-wait.Done():
		p.waitEnded(w, r)
		return
	}
	res, err := reserve(wait, p.bodies, p.opts.Bodies, r.ContentLength)
	if err != nil {
		p.waitEnded(w, r)
		return
	}
	defer res.release()
	body, f := p.readBody(w, r, res)
	if f != nil {
		p.refuse(w, r, f)
		return
	}
	sh, f := p.shape(path, body)
	if f != nil {
		p.refuse(w, r, f)
		return
	}
	call := Call{Model: sh.model, Stream: sh.stream}
	// Checked now, not at arrival: the wait for a slot or for the body may
	// have outlasted the wall time (a slot freed by the wall time's own
	// cut can be taken in the same instant).
	if err := p.reserve(time.Now()); err != nil {
		call.Status, call.Error, call.Duration = http.StatusForbidden, err.Error(), time.Since(start)
		p.record(call)
		p.refuse(w, r, p.budgetRefusal(err))
		return
	}

	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	unlink := context.AfterFunc(p.ctx, stop) // wall-time budget and Close cut the call
	defer unlink()
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, p.target(path, query), &pieceReader{pieces: sh.pieces, res: res})
	if err != nil {
		p.api.writeError(w, http.StatusBadRequest, "invalid_request_error", "agentbox: "+err.Error())
		return
	}
	copyAllowed(out.Header, r.Header, p.api.requestHeaders, p.api.requestHeaderPrefixes)
	p.api.setKey(out.Header, p.opts.APIKey)
	out.ContentLength = sh.size

	resp, err := p.client.Do(out)
	res.release() // the transport is done with the body
	if err != nil {
		call.Status, call.Error, call.Duration = http.StatusBadGateway, scrub(err.Error(), p.opts.APIKey), time.Since(start)
		p.record(call)
		msg := "agentbox: the model host is unreachable: " + call.Error
		if p.ctx.Err() != nil && p.wallSpent() {
			msg = "agentbox: " + ErrBudgetExceeded.Error() + ": the request's wall time is used up"
		}
		p.api.writeError(w, http.StatusBadGateway, "api_error", msg)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	call.Status = resp.StatusCode
	copyAllowed(w.Header(), resp.Header, p.api.responseHeaders, p.api.responseHeaderPrefixes)
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)

	m := newMeter(p.api, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
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
				if p.ctx.Err() != nil {
					p.wallSpent()
				}
			}
			break
		}
	}
	call.Usage = m.Usage()
	call.Duration = time.Since(start)
	p.record(call)
}

// waitEnded answers a call whose wait for a slot or for body bytes ended:
// a budget refusal when the wall time or Close ended it (a client that
// went away gets nothing).
func (p *Proxy) waitEnded(w http.ResponseWriter, r *http.Request) {
	if p.ctx.Err() != nil && r.Context().Err() == nil {
		p.wallSpent()
		p.refuse(w, r, p.budgetRefusal(fmt.Errorf("%w: the request's wall time is used up", ErrBudgetExceeded)))
	}
}

// refuse answers f and logs what was refused.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, f *refusal) {
	p.log.Warn("model call refused", "method", clip(r.Method), "uri", p.uri(r), "status", f.status, "reason", f.reason)
	f.write(w, p.api)
}

// uri is the request target for logs, clipped, with the token scrubbed.
func (p *Proxy) uri(r *http.Request) string {
	return scrub(clip(r.RequestURI), p.opts.Token)
}

func (p *Proxy) budgetRefusal(err error) *refusal {
	return &refusal{status: http.StatusForbidden, errType: "permission_error", reason: err.Error(),
		msg: err.Error() + "; the gateway's sandbox budget for this request is spent"}
}

// checkLength wants a declared body length within the caps: the byte
// budget is reserved from it before the body is read (Claude Code always
// sends Content-Length).
func (p *Proxy) checkLength(r *http.Request) *refusal {
	limit := min(p.opts.MaxRequestBytes, p.opts.Bodies.Size())
	switch {
	case r.ContentLength < 0:
		return &refusal{status: http.StatusLengthRequired, errType: "invalid_request_error", reason: "no Content-Length",
			msg: "send the request body with a Content-Length; the sandbox's model proxy refuses chunked bodies"}
	case r.ContentLength > limit:
		return &refusal{status: http.StatusRequestEntityTooLarge, errType: "request_too_large", reason: fmt.Sprintf("body of %d bytes", r.ContentLength),
			msg: fmt.Sprintf("request body over %d bytes; the sandbox's model proxy caps request size", limit)}
	}
	return nil
}

// readBody reads the declared length under the reservation, within
// BodyTimeout.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, res *reservation) ([]byte, *refusal) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(p.opts.BodyTimeout))
	body := make([]byte, r.ContentLength)
	res.hold(int64(len(body)))
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, badRequest("reading the request body: %v", err)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}

// pieceReader sends a shaped body; Close (by the transport once it is done
// with the body) drops the body and gives the byte reservation back. The
// transport may call Close from another goroutine than Read, and the
// response keeps the request (and so this reader) alive while it streams.
type pieceReader struct {
	mu     sync.Mutex
	pieces [][]byte
	res    *reservation
}

func (b *pieceReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for n < len(p) && len(b.pieces) > 0 {
		c := copy(p[n:], b.pieces[0])
		n += c
		if b.pieces[0] = b.pieces[0][c:]; len(b.pieces[0]) == 0 {
			b.pieces = b.pieces[1:]
		}
	}
	if n == 0 && len(b.pieces) == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo lets the transport write the pieces without copying them.
func (b *pieceReader) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for len(b.pieces) > 0 {
		c, err := w.Write(b.pieces[0])
		n += int64(c)
		if b.pieces[0] = b.pieces[0][c:]; len(b.pieces[0]) == 0 {
			b.pieces = b.pieces[1:]
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (b *pieceReader) Close() error {
	b.mu.Lock()
	b.pieces = nil
	b.mu.Unlock()
	b.res.release()
	return nil
}

// target joins the upstream base with an allowed path and query.
func (p *Proxy) target(path, query string) string {
	u := *p.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + p.api.upstreamPath(path)
	u.RawPath = ""
	u.RawQuery = query
	return u.String()
}

// scrub removes the key from a message, in case an error echoes a header.
func scrub(msg, key string) string {
	if key == "" {
		return msg
	}
	return strings.ReplaceAll(msg, key, "[redacted]")
}
