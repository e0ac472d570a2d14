package mcphost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/executor/helper"
)

// AgentServer is the server id the agent-facing CLI (`abx`) presents in its
// hello: one connection that sees every granted tool, each named
// mcp__<server>__<tool> as Claude Code names it.
const AgentServer = ""

// errRevoked is the cause of a session's context once its token died.
var errRevoked = errors.New("mcphost: the request ended and its token was revoked")

// OpenOptions say where and for whom a Session serves.
type OpenOptions struct {
	// HostDir is the sandbox's host directory (Sandbox.HostDir), mounted at
	// /run/agentbox in the container; mcp.sock and the token file go there.
	// A sandbox without one (a Kubernetes pod) sets Listener and WriteToken
	// instead.
	HostDir string
	// Listener, with HostDir empty, is where the sandbox's helper connects
	// (helper.ListenSandbox for helper.MCPSocket); the Session closes it.
	Listener net.Listener
	// WriteToken, with HostDir empty, gives the request's token to the
	// sandbox's helper (the kubernetes Sandbox's WriteToken).
	WriteToken func(token string) error
	// UID and GID own the socket and the token file (the sandbox user);
	// -1 keeps the owner.
	UID, GID int
	// Sandbox is the sandbox's id, for the handlers and the logs.
	Sandbox string
	// Grant is the request's token, identity and allowlist.
	Grant Grant
	// OnCall, when set, hears of every tool call the Session runs: once
	// when it starts (Done false) and once when it ended (Done true), from
	// the call's goroutine. It is never called after Close returned, and
	// calls are serialised: keep it short.
	OnCall func(CallEvent)
}

// How a call reached the Session (CallEvent.Via).
const (
	// ViaMCP is the agent CLI's own MCP client (mcp__<server>__<tool>
	// through the relay); the CLI reports these calls in its stream too.
	ViaMCP = "mcp"
	// ViaCLI is the agent-facing CLI (abx), run by the agent from its
	// shell; the CLI's stream shows only the shell command.
	ViaCLI = "abx"
)

// CallEvent is one tool call as OpenOptions.OnCall sees it.
type CallEvent struct {
	// ID is unique within the Session ("call-1", "call-2", ...).
	ID string
	// Via is ViaMCP or ViaCLI.
	Via string
	// Server and Tool name the tool.
	Server, Tool string
	// Arguments is the JSON object the caller sent.
	Arguments json.RawMessage
	// Done is false at the start, true at the end; then Result is set (a
	// failure is an IsError result with the message the agent got) and
	// Took is the call's duration.
	Done   bool
	Result *Result
	Took   time.Duration
}

// Context is what a Session tells the agent CLI about its request (the
// instructions of its AgentServer connection, as JSON).
type Context struct {
	Identity
	Sandbox     string    `json:"sandbox"`
	Opened      time.Time `json:"opened"`
	CallTimeout string    `json:"call_timeout"`
	Servers     []string  `json:"servers"`
}

// Session is one run's MCP endpoint: mcp.sock in the sandbox's host
// directory, accepting connections that present the run's token. Close it
// when the request ends: the token dies, calls in flight are cancelled and
// connections closed. Its methods are safe for concurrent use.
type Session struct {
	h      *Host
	o      OpenOptions
	log    hclog.Logger
	ln     net.Listener
	opened time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc
	sem    chan struct{}

	// identity is the request's (Grant.Identity, or Bind's for a session
	// opened before its chat was known).
	identity atomic.Pointer[Identity]
	revoked  atomic.Bool
	seq      atomic.Int64
	obsMu    sync.Mutex // serialises OnCall; closed stops it
	closed   bool
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
	once     sync.Once
	err      error
}

// Open starts a Session: it writes the token file (mode 0400, the sandbox
// user's; the in-container relay and CLI read it) and listens on mcp.sock.
func (h *Host) Open(o OpenOptions) (*Session, error) {
	if o.HostDir == "" && (o.Listener == nil || o.WriteToken == nil) {
		return nil, errors.New("mcphost: OpenOptions.HostDir is empty; pass the sandbox's host directory (Sandbox.HostDir), or Listener and WriteToken for a sandbox without one")
	}
	if o.Grant.Token == "" {
		tok, err := NewToken()
		if err != nil {
			return nil, err
		}
		o.Grant.Token = tok
	}
	ln := o.Listener
	if o.HostDir == "" {
		if err := o.WriteToken(o.Grant.Token); err != nil {
			return nil, fmt.Errorf("mcphost: give the sandbox its token: %w", err)
		}
	} else {
		if err := writeToken(o); err != nil {
			return nil, err
		}
		var err error
		ln, err = helper.ListenHostSocket(o.HostDir, helper.MCPSocket, o.UID, o.GID)
		if err != nil {
			_ = os.Remove(filepath.Join(o.HostDir, helper.TokenFile))
			return nil, fmt.Errorf("mcphost: %w", err)
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{h: h, o: o, ln: ln, opened: h.opts.Now(), ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, h.opts.MaxConns), conns: map[net.Conn]struct{}{},
		log: h.log.With("sandbox", o.Sandbox, "user", o.Grant.Identity.User, "chat", o.Grant.Identity.Chat, "assistant", o.Grant.Identity.Assistant)}
	id := o.Grant.Identity
	s.identity.Store(&id)
	s.wg.Go(s.accept)
	return s, nil
}

// NewToken returns a fresh random per-request token.
func NewToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mcphost: token: %w", err)
	}
	return "abx-mcp-" + hex.EncodeToString(b[:]), nil
}

// writeToken writes the token file atomically, readable only by the
// sandbox user.
func writeToken(o OpenOptions) error {
	path := filepath.Join(o.HostDir, helper.TokenFile)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, []byte(o.Grant.Token+"\n"), 0o400); err != nil {
		return fmt.Errorf("mcphost: write the token file: %w", err)
	}
	if o.UID >= 0 {
		if err := os.Chown(tmp, o.UID, o.GID); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("mcphost: give the token file to the sandbox user %d:%d: %w", o.UID, o.GID, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("mcphost: write the token file: %w", err)
	}
	return nil
}

// Token is the request's token.
func (s *Session) Token() string { return s.o.Grant.Token }

// Identity is who the session serves now.
func (s *Session) Identity() Identity { return *s.identity.Load() }

// Bind gives a session opened without a chat (Grant.Identity.Chat empty:
// a CLI started before its request, whose MCP server connects at start)
// the chat of the request that takes it, once. Until then every tool call
// is refused: no handler runs without the request's identity. The user
// and assistant must be the grant's.
func (s *Session) Bind(id Identity) error {
	for {
		cur := s.identity.Load()
		switch {
		case id.Chat == "":
			return fmt.Errorf("mcphost: bind the session to a chat: the chat is empty: %w", ErrRefused)
		case id.User != cur.User || id.Assistant != cur.Assistant:
			return fmt.Errorf("mcphost: the session was opened for %s/%s and cannot serve %s/%s: %w", cur.User, cur.Assistant, id.User, id.Assistant, ErrRefused)
		case cur.Chat == id.Chat:
			return nil
		case cur.Chat != "":
			return fmt.Errorf("mcphost: the session serves the chat %q already: %w", cur.Chat, ErrRefused)
		}
		if s.identity.CompareAndSwap(cur, &id) {
			return nil
		}
	}
}

// Revoke kills the token: later connections are refused, open ones closed
// and calls in flight cancelled. The socket stays until Close.
func (s *Session) Revoke() {
	if s.revoked.Swap(true) {
		return
	}
	s.cancel(errRevoked)
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	if s.o.HostDir != "" {
		_ = os.Remove(filepath.Join(s.o.HostDir, helper.TokenFile))
	}
}

// Close revokes the token, stops listening and waits for the connections'
// goroutines (a handler that ignores its context is abandoned, not waited
// for).
func (s *Session) Close() error {
	s.once.Do(func() {
		s.Revoke()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.err = err
		}
		s.wg.Wait()
		s.obsMu.Lock()
		s.closed = true
		s.obsMu.Unlock()
		_ = os.Remove(filepath.Join(s.o.HostDir, helper.MCPSocket))
	})
	return s.err
}

func (s *Session) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.log.Warn("refused an MCP connection: too many open", "max", cap(s.sem))
			_ = helper.WriteMCPAck(c, fmt.Errorf("too many open MCP connections (%d); close one and retry", cap(s.sem)))
			_ = c.Close()
			continue
		}
		if !s.track(c) {
			// Revoked: answer the hello with the reason, then close.
			s.wg.Go(func() {
				defer func() { <-s.sem }()
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(s.h.opts.HelloTimeout))
				if _, err := helper.ReadMCPHello(helper.NewLineReader(c, s.h.opts.MaxLine)); err == nil {
					err = s.admit(helper.MCPHello{})
					s.log.Warn("refused an MCP connection", "reason", err)
					_ = helper.WriteMCPAck(c, err)
				}
			})
			continue
		}
		s.wg.Go(func() {
			defer func() { <-s.sem }()
			defer s.untrack(c)
			s.serve(c)
		})
	}
}

func (s *Session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Session) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

// admit checks a hello against the grant. Its error text goes back to the
// relay: it never contains the token.
func (s *Session) admit(h helper.MCPHello) error {
	switch {
	case s.revoked.Load():
		return fmt.Errorf("%w: the token expired (its request ended); tools are only available during the request", ErrRefused)
	case !h.TokenMatches(s.o.Grant.Token):
		return fmt.Errorf("%w: wrong token for this sandbox; use the token in /run/agentbox/token of this sandbox", ErrRefused)
	case h.Server == AgentServer:
		return nil
	}
	if _, ok := s.o.Grant.Allow[h.Server]; !ok {
		return fmt.Errorf("%w: the server %q is not enabled for this assistant; add it to mcp.servers", ErrRefused, h.Server)
	}
	if len(s.h.granted(&s.o.Grant, h.Server)) == 0 {
		return fmt.Errorf("%w: the gateway has no allowed tools for the server %q; register them on the host or fix mcp.servers[].tools", ErrRefused, h.Server)
	}
	return nil
}

func (s *Session) serve(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.h.opts.HelloTimeout))
	lr := helper.NewLineReader(c, s.h.opts.MaxLine)
	hello, err := helper.ReadMCPHello(lr)
	if err != nil {
		s.log.Warn("refused an MCP connection: bad hello", "error", err)
		_ = helper.WriteMCPAck(c, fmt.Errorf("%w: send the hello line first (agentbox-helper mcp does)", ErrRefused))
		return
	}
	log := s.log.With("server", hello.Server)
	if err := s.admit(hello); err != nil {
		log.Warn("refused an MCP connection", "reason", err)
		_ = helper.WriteMCPAck(c, err)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	srv := s.server(hello.Server, log)
	if err := helper.WriteMCPAck(c, nil); err != nil {
		return
	}
	t := helper.NewLineTransport(lr, c)
	ss, err := srv.Connect(s.ctx, t, nil)
	if err != nil {
		log.Warn("MCP session failed to start", "error", err)
		return
	}
	stop := context.AfterFunc(s.ctx, func() { _ = ss.Close() })
	defer stop()
	if err := ss.Wait(); errors.Is(err, helper.ErrFrameTooLarge) {
		log.Warn("closed an MCP connection: message over the size cap", "max_bytes", s.h.opts.MaxLine)
	}
}

// server builds the MCP server one connection sees: the granted tools of
// one server, or of all servers for the agent CLI.
func (s *Session) server(id string, log hclog.Logger) *mcp.Server {
	var tools []*registered
	var instructions string
	via := ViaMCP
	if id == AgentServer {
		via = ViaCLI
		servers := make([]string, 0, len(s.o.Grant.Allow))
		for srv := range s.o.Grant.Allow {
			servers = append(servers, srv)
		}
		sort.Strings(servers)
		for _, srv := range servers {
			tools = append(tools, s.h.granted(&s.o.Grant, srv)...)
		}
		b, _ := json.Marshal(Context{Identity: *s.identity.Load(), Sandbox: s.o.Sandbox, Opened: s.opened,
			CallTimeout: s.h.opts.CallTimeout.String(), Servers: servers})
		instructions = string(b)
	} else {
		tools = s.h.granted(&s.o.Grant, id)
	}
	ms := mcp.NewServer(&mcp.Implementation{Name: "agentbox", Version: "1"}, &mcp.ServerOptions{Instructions: instructions, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		name := t.Name
		if id == AgentServer {
			name = "mcp__" + t.server + "__" + t.Name
		}
		names = append(names, name)
		ms.AddTool(&mcp.Tool{Name: name, Description: t.Description, InputSchema: t.schema}, s.handler(t, via, log))
	}
	ms.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" && !slices.Contains(names, p.Name) {
				log.Warn("refused a tool call outside the allowlist", "tool", p.Name)
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
					Message: fmt.Sprintf("tool %q is not available to this assistant; tools/list shows the tools it may call", p.Name)}
			}
			return next(ctx, method, req)
		}
	})
	return ms
}

// handler wraps a registered tool: schema check, deadline, cancellation
// with the request, panic recovery, one log line and two OnCall events
// per call.
func (s *Session) handler(t *registered, via string, log hclog.Logger) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		ev := CallEvent{ID: fmt.Sprintf("call-%d", s.seq.Add(1)), Via: via, Server: t.server, Tool: t.Name, Arguments: args}
		s.observe(ev)
		res, err := s.run(ctx, t, args)
		took := time.Since(start)
		if err != nil {
			log.Warn("tool call failed", "tool", t.Name, "via", via, "took", took, "error", err)
			res = &Result{Text: err.Error(), IsError: true}
		} else {
			log.Info("tool call", "tool", t.Name, "via", via, "took", took, "is_error", res.IsError, "result_bytes", len(res.Text))
		}
		ev.Done, ev.Result, ev.Took = true, res, took
		s.observe(ev)
		return &mcp.CallToolResult{IsError: res.IsError, Content: []mcp.Content{&mcp.TextContent{Text: res.Text}}}, nil
	}
}

// observe passes ev to OnCall unless the Session is closed.
func (s *Session) observe(ev CallEvent) {
	if s.o.OnCall == nil {
		return
	}
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	if !s.closed {
		s.o.OnCall(ev)
	}
}

// outcome is a handler's return.
type outcome struct {
	res *Result
	err error
}

// run validates args and runs the handler under the call's deadline and
// the session's life, recovering a panic; a handler still running at the
// deadline is abandoned.
func (s *Session) run(ctx context.Context, t *registered, args json.RawMessage) (*Result, error) {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return nil, fmt.Errorf("the arguments of %s are not JSON: %w; send a JSON object", t.Name, err)
	}
	if err := t.resolved.Validate(v); err != nil {
		return nil, fmt.Errorf("the arguments of %s do not match its input schema: %w; see the tool's schema (abx describe %s/%s)", t.Name, err, t.server, t.Name)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.h.opts.CallTimeout, ErrCallTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	id := *s.identity.Load()
	if id.Chat == "" {
		return nil, fmt.Errorf("%w: %s cannot run before the request starts; call it during the request", ErrRefused, t.Name)
	}
	call := &Call{Identity: id, Sandbox: s.o.Sandbox, Server: t.server, Tool: t.Name, Arguments: args}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("%w: %s: %v; the gateway's log has the details, retrying will likely fail the same way", ErrHandlerPanic, t.Name, p)}
			}
		}()
		res, err := t.Handler(ctx, call)
		if res == nil && err == nil {
			res = &Result{}
		}
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
		if s.ctx.Err() != nil {
			return nil, fmt.Errorf("the tool %s was cancelled: %w", t.Name, context.Cause(s.ctx))
		}
		if errors.Is(context.Cause(ctx), ErrCallTimeout) {
			return nil, fmt.Errorf("%w: %s did not finish within %v and was cancelled; retry with less work or ask the gateway to raise the limit", ErrCallTimeout, t.Name, s.h.opts.CallTimeout)
		}
		return nil, fmt.Errorf("the tool %s was cancelled: %w", t.Name, ctx.Err())
	}
}
