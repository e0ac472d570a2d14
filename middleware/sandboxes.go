package middleware

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Client-owned sandboxes (seed 004): a client creates a sandbox for an
// assistant before it sends messages, names it in its chat requests, keeps
// it alive with heartbeats and deletes it when done. A sandbox is a
// workspace of its own (not a chat's) with, between requests, the
// assistant's container kept idle as the session policy keeps a chat's
// (warm.go); every chat that names the sandbox runs in that workspace and
// container, one request at a time, each chat with its own CLI session.
// A sandbox belongs to the user who created it: another user's id is "not
// found", never a leak. Without a heartbeat or a request for its TTL it
// is stopped: its container is removed, its workspace kept; a heartbeat or
// a request starts it again. A stopped sandbox is forgotten after
// SandboxForget; Delete forgets it at once. The records survive a restart
// when Options.SandboxDir is set (sandboxstore.go); the kept containers do
// not.

// Bounds of client sandboxes.
const (
	DefaultSandboxTTL = 30 * time.Minute
	MinSandboxTTL     = time.Second
	MaxSandboxTTL     = 24 * time.Hour
	// MaxSandboxesPerUser bounds the sandboxes one user holds (stopped
	// ones included).
	MaxSandboxesPerUser = 16
	// SandboxForget is how long a stopped sandbox stays listed.
	SandboxForget  = 24 * time.Hour
	maxSandboxTags = 16
	maxTagKey      = 64
	maxTagValue    = 256
)

// States of a client sandbox.
const (
	// SandboxIdle: no container; the next request starts one.
	SandboxIdle = "idle"
	// SandboxWarm: its container is kept, idle, for the next request.
	SandboxWarm = "warm"
	// SandboxRunning: a request runs in it.
	SandboxRunning = "running"
	// SandboxStopped: its TTL passed without a heartbeat; the container
	// is gone, the workspace kept.
	SandboxStopped = "stopped"
)

// sandboxChatPrefix marks the workspace of a client sandbox: its chat key
// is the prefix and the sandbox id, so no chat id can name it (chat ids
// are refused with this prefix).
const sandboxChatPrefix = "_sbx."

// SandboxManager is the client sandbox API an HTTP adapter serves; the
// Orchestrator is one.
type SandboxManager interface {
	CreateSandbox(ctx context.Context, user string, c SandboxCreate) (ClientSandbox, error)
	Sandboxes(user string) []ClientSandbox
	Sandbox(user, id string) (ClientSandbox, error)
	HeartbeatSandbox(user, id string) (ClientSandbox, error)
	DeleteSandbox(ctx context.Context, user, id string) error
}

var _ SandboxManager = (*Orchestrator)(nil)

// ClientSandbox is a client-owned sandbox as its owner sees it.
type ClientSandbox struct {
	ID        string            `json:"id"`
	Assistant string            `json:"assistant"`
	Tags      map[string]string `json:"tags,omitempty"`
	TTL       time.Duration     `json:"-"`
	Created   time.Time         `json:"created_at"`
	Expires   time.Time         `json:"expires_at"`
	State     string            `json:"state"`
}

// SandboxCreate is a request to create a client sandbox.
type SandboxCreate struct {
	// ID is the client's id for it ("" picks one: "sb_" and 16 hex
	// digits); executor.ValidateID's rule.
	ID string
	// Assistant is the sandboxed assistant whose image and options it
	// has; only requests for that assistant may name it.
	Assistant string
	// TTL is how long it lives without a heartbeat or a request
	// (DefaultSandboxTTL when 0; MinSandboxTTL to MaxSandboxTTL).
	TTL time.Duration
	// Tags are the client's metadata (at most 16; keys 1-64 bytes of
	// [A-Za-z0-9_.:/-], values up to 256 bytes).
	Tags map[string]string
	// Prewarm starts its container before the first message and keeps it
	// as a request's would be kept; Create returns once it is ready.
	Prewarm bool
}

var tagKeyRe = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,64}$`)

// clientSandbox is the registry's record.
type clientSandbox struct {
	ClientSandbox
	user    string
	running int
	stopped bool
	timer   *time.Timer
}

// place is the lease, workspace and kept-container key of the sandbox.
func (s *clientSandbox) place() chatID { return chatID{s.user, sandboxChatPrefix + s.ID} }

// sandboxRegistry holds the client sandboxes by user and id.
type sandboxRegistry struct {
	o      *Orchestrator
	mu     sync.Mutex
	byUser map[string]map[string]*clientSandbox
	closed bool
}

func newSandboxRegistry(o *Orchestrator) *sandboxRegistry {
	return &sandboxRegistry{o: o, byUser: map[string]map[string]*clientSandbox{}}
}

// errNoSandbox is the one answer for an id the user does not own.
func errNoSandbox(id string) *Error {
	return &Error{Kind: KindNotFound, Param: "sandbox", Message: fmt.Sprintf("there is no sandbox %q for this user; create it with POST /v1/sandboxes", id)}
}

// CreateSandbox creates a client sandbox for user (see SandboxCreate). An
// id the user already holds is answered with KindBusy.
func (o *Orchestrator) CreateSandbox(ctx context.Context, user string, c SandboxCreate) (ClientSandbox, error) {
	if err := executor.ValidateID("user", user); err != nil {
		return ClientSandbox{}, &Error{Kind: KindBadRequest, Param: "user", Err: err, Message: "a sandbox needs a valid user id: " + unwrapMessage(err)}
	}
	if c.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.ID = "sb_" + hex.EncodeToString(b[:])
	}
	if err := executor.ValidateID("sandbox id", c.ID); err != nil {
		return ClientSandbox{}, &Error{Kind: KindBadRequest, Param: "id", Err: err, Message: unwrapMessage(err)}
	}
	if len(sandboxChatPrefix)+len(c.ID) > 128 {
		return ClientSandbox{}, &Error{Kind: KindBadRequest, Param: "id", Message: fmt.Sprintf("the sandbox id is %d bytes long; use at most %d", len(c.ID), 128-len(sandboxChatPrefix))}
	}
	switch {
	case c.TTL == 0:
		c.TTL = DefaultSandboxTTL
	case c.TTL < MinSandboxTTL || c.TTL > MaxSandboxTTL:
		return ClientSandbox{}, &Error{Kind: KindBadRequest, Param: "ttl", Message: fmt.Sprintf("ttl %v is out of range; use %v to %v", c.TTL, MinSandboxTTL, MaxSandboxTTL)}
	}
	if err := checkTags(c.Tags); err != nil {
		return ClientSandbox{}, err
	}
	a, err := o.opts.Catalog.Lookup(ctx, c.Assistant)
	switch {
	case errors.Is(err, ErrUnknownAssistant):
		return ClientSandbox{}, &Error{Kind: KindNotFound, Param: "model", Message: fmt.Sprintf("the assistant %q does not exist; GET /v1/models lists them", c.Assistant)}
	case err != nil:
		return ClientSandbox{}, Errorf(KindConfig, err, "the assistant %q cannot be loaded; the gateway's log has the details", c.Assistant)
	case a.Sandbox == nil:
		return ClientSandbox{}, &Error{Kind: KindBadRequest, Param: "model", Message: fmt.Sprintf("the assistant %q has no sandbox; name a sandboxed assistant", c.Assistant)}
	}
	now := time.Now()
	s := &clientSandbox{ClientSandbox: ClientSandbox{ID: c.ID, Assistant: a.ID, Tags: maps.Clone(c.Tags), TTL: c.TTL,
		Created: now.UTC(), Expires: now.Add(c.TTL).UTC()}, user: user}
	reg := o.sandboxes
	reg.mu.Lock()
	mine := reg.byUser[user]
	switch {
	case reg.closed:
		reg.mu.Unlock()
		return ClientSandbox{}, Errorf(KindUnavailable, nil, "the gateway is shutting down; send the request again")
	case mine[c.ID] != nil:
		reg.mu.Unlock()
		return ClientSandbox{}, &Error{Kind: KindBusy, Param: "id", Message: fmt.Sprintf("the sandbox %q exists; heartbeat it, or delete it first", c.ID)}
	case len(mine) >= MaxSandboxesPerUser:
		reg.mu.Unlock()
		return ClientSandbox{}, &Error{Kind: KindOverloaded, Message: fmt.Sprintf("this user holds %d sandboxes, the limit; delete one first", len(mine))}
	}
	if mine == nil {
		mine = map[string]*clientSandbox{}
		reg.byUser[user] = mine
	}
	mine[c.ID] = s
	if c.Prewarm {
		// The prewarm is the sandbox's first use: like a request, it
		// holds the TTL, which counts from when the sandbox is handed
		// back. A TTL shorter than a container start on a loaded
		// machine would otherwise stop the sandbox before its creator
		// saw it.
		s.running++
	}
	s.timer = time.AfterFunc(c.TTL, func() { reg.expire(s) })
	reg.save(user)
	reg.mu.Unlock()
	o.log.Info("client sandbox created", "user", user, "sandbox", c.ID, "assistant", a.ID, "ttl", c.TTL, "prewarm", c.Prewarm)
	if c.Prewarm {
		err := o.prewarm(ctx, s, a)
		reg.mu.Lock()
		s.running--
		if err == nil && reg.byUser[user][c.ID] == s {
			reg.extend(s)
		}
		reg.mu.Unlock()
		if err != nil {
			_ = o.DeleteSandbox(context.WithoutCancel(ctx), user, c.ID)
			return ClientSandbox{}, err
		}
	}
	return reg.view(s), nil
}

// checkTags enforces SandboxCreate.Tags' bounds.
func checkTags(tags map[string]string) error {
	if len(tags) > maxSandboxTags {
		return &Error{Kind: KindBadRequest, Param: "tags", Message: fmt.Sprintf("%d tags; use at most %d", len(tags), maxSandboxTags)}
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if !tagKeyRe.MatchString(k) {
			return &Error{Kind: KindBadRequest, Param: "tags", Message: fmt.Sprintf("tag key %q: use 1-%d characters of [A-Za-z0-9_.:/-]", k, maxTagKey)}
		}
		if len(tags[k]) > maxTagValue {
			return &Error{Kind: KindBadRequest, Param: "tags", Message: fmt.Sprintf("tag %q's value is %d bytes long; use at most %d", k, len(tags[k]), maxTagValue)}
		}
	}
	return nil
}

// Sandboxes lists user's client sandboxes, oldest first.
func (o *Orchestrator) Sandboxes(user string) []ClientSandbox {
	reg := o.sandboxes
	reg.mu.Lock()
	list := slices.Collect(maps.Values(reg.byUser[user]))
	reg.mu.Unlock()
	slices.SortFunc(list, func(a, b *clientSandbox) int { return a.Created.Compare(b.Created) })
	out := make([]ClientSandbox, 0, len(list))
	for _, s := range list {
		out = append(out, reg.view(s))
	}
	return out
}

// Sandbox returns user's client sandbox id.
func (o *Orchestrator) Sandbox(user, id string) (ClientSandbox, error) {
	reg := o.sandboxes
	reg.mu.Lock()
	s := reg.byUser[user][id]
	reg.mu.Unlock()
	if s == nil {
		return ClientSandbox{}, errNoSandbox(id)
	}
	return reg.view(s), nil
}

// HeartbeatSandbox extends user's sandbox id by its TTL from now (a
// stopped one is started again: its next request gets a new container)
// and keeps its container, if kept, as long.
func (o *Orchestrator) HeartbeatSandbox(user, id string) (ClientSandbox, error) {
	reg := o.sandboxes
	reg.mu.Lock()
	s := reg.byUser[user][id]
	if s == nil {
		reg.mu.Unlock()
		return ClientSandbox{}, errNoSandbox(id)
	}
	reg.extend(s)
	reg.mu.Unlock()
	o.pool.touch(s.place(), s.TTL)
	return reg.view(s), nil
}

// DeleteSandbox forgets user's sandbox id and removes its kept container;
// its workspace is left to the executor's retention. A request running in
// it finishes, and its container is then removed instead of kept.
func (o *Orchestrator) DeleteSandbox(ctx context.Context, user, id string) error {
	reg := o.sandboxes
	reg.mu.Lock()
	s := reg.byUser[user][id]
	if s == nil {
		reg.mu.Unlock()
		return errNoSandbox(id)
	}
	reg.forget(s)
	reg.mu.Unlock()
	o.pool.evict(ctx, s.place(), "its client sandbox was deleted")
	o.log.Info("client sandbox deleted", "user", user, "sandbox", id)
	return nil
}

// extend restarts s's TTL from now. Held: mu.
func (reg *sandboxRegistry) extend(s *clientSandbox) {
	s.stopped = false
	s.Expires = time.Now().Add(s.TTL).UTC()
	s.timer.Reset(s.TTL)
	reg.save(s.user)
}

// forget drops s. Held: mu.
func (reg *sandboxRegistry) forget(s *clientSandbox) {
	s.timer.Stop()
	s.stopped = true
	if mine := reg.byUser[s.user]; mine[s.ID] == s {
		delete(mine, s.ID)
		if len(mine) == 0 {
			delete(reg.byUser, s.user)
		}
		reg.save(s.user)
	}
}

// expire stops s when its TTL passed (its container goes, its workspace
// stays), or forgets it when it has been stopped for SandboxForget. A
// request in it keeps it alive until it ends.
func (reg *sandboxRegistry) expire(s *clientSandbox) {
	reg.mu.Lock()
	if reg.byUser[s.user][s.ID] != s {
		reg.mu.Unlock()
		return
	}
	switch {
	case s.running > 0:
		s.timer.Reset(s.TTL)
		reg.mu.Unlock()
		return
	case s.stopped:
		reg.forget(s)
		reg.mu.Unlock()
		return
	}
	s.stopped = true
	s.timer.Reset(SandboxForget)
	reg.save(s.user)
	reg.mu.Unlock()
	reg.o.pool.evict(context.Background(), s.place(), "its client sandbox's ttl passed without a heartbeat")
	reg.o.log.Info("client sandbox stopped: no heartbeat within its ttl", "user", s.user, "sandbox", s.ID, "ttl", s.TTL)
}

// view is s as its owner sees it.
func (reg *sandboxRegistry) view(s *clientSandbox) ClientSandbox {
	reg.mu.Lock()
	v := s.ClientSandbox
	v.Tags = maps.Clone(s.Tags)
	running, stopped := s.running, s.stopped
	reg.mu.Unlock()
	switch {
	case running > 0:
		v.State = SandboxRunning
	case stopped:
		v.State = SandboxStopped
	case reg.o.pool.has(s.place()):
		v.State = SandboxWarm
	default:
		v.State = SandboxIdle
	}
	return v
}

// attach checks that user's sandbox id may serve a request for assistant
// a and marks it running (a request counts as a heartbeat); detach undoes
// it and restarts the TTL.
func (reg *sandboxRegistry) attach(user, id string, a *Assistant) (*clientSandbox, func(), error) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	s := reg.byUser[user][id]
	if s == nil {
		return nil, nil, errNoSandbox(id)
	}
	if s.Assistant != a.ID {
		return nil, nil, &Error{Kind: KindBadRequest, Param: "sandbox", Message: fmt.Sprintf("the sandbox %q was created for the assistant %q; send its requests with that model, or create a sandbox for %q", id, s.Assistant, a.ID)}
	}
	reg.extend(s)
	s.running++
	return s, func() {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		s.running--
		if reg.byUser[s.user][s.ID] == s {
			reg.extend(s)
		}
	}, nil
}

// live reports whether s may keep a container (not deleted or stopped).
func (reg *sandboxRegistry) live(s *clientSandbox) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.byUser[s.user][s.ID] == s && !s.stopped
}

// close forgets every sandbox (the pool's close removes the containers).
func (reg *sandboxRegistry) close() {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.closed = true
	for _, mine := range reg.byUser {
		for _, s := range mine {
			s.timer.Stop()
		}
	}
	reg.byUser = map[string]map[string]*clientSandbox{}
}

// inSandbox returns the assistant a request in client sandbox s runs
// with: a's options with the session policy's keeping, for the sandbox's
// TTL, so that its container is kept between requests.
func inSandbox(a *Assistant, s *clientSandbox) *Assistant {
	sb := *a.Sandbox
	sb.Spec.IdleTTL = min(s.TTL, SessionLife)
	b := *a
	b.Sandbox = &sb
	return &b
}

// isSandboxChat reports whether a chat id names a client sandbox's
// workspace, which chat ids may not.
func isSandboxChat(chat string) bool { return strings.HasPrefix(chat, sandboxChatPrefix) }

// prewarm starts s's container before its first message, as a request
// would (the sandbox's lease, a run slot, Create, the model route, the
// workspace files and HOME), keeps it for the first request, and starts
// the CLI for a new session in it, waiting on stdin: the first request of
// a chat without a session adopts that session and only writes its
// message (a chat with a session to resume, or other options, discards it).
func (o *Orchestrator) prewarm(ctx context.Context, s *clientSandbox, a *Assistant) (err error) {
	ctx, exit, err := o.enter(ctx)
	if err != nil {
		return err
	}
	defer exit()
	a = inSandbox(a, s)
	if d := a.Sandbox.Spec.Timeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errRunTimeout)
		defer cancel()
	}
	place := s.place()
	r := &run{o: o, a: a, req: &Request{AssistantID: a.ID, Model: a.ID, UserID: place.user, ChatID: place.chat},
		emit: func(executor.Event) error { return nil }, arrived: time.Now(), place: place, client: s, prewarming: true,
		log: o.log.With("assistant", a.ID, "user", place.user, "sandbox", s.ID, "phase", "prewarm")}
	ctx = r.startTrace(ctx)
	defer r.tr.req.End()
	defer r.endPhase()
	release, err := r.acquire(ctx)
	if err == nil {
		r.enter("workspace")
		err = r.workspace(ctx)
	}
	if release != nil {
		release(err)
	}
	switch {
	case errors.Is(err, errWarmAlready):
		return nil
	case err != nil:
		return err
	}
	r.log.Debug("client sandbox pre-warmed", "took", time.Since(r.arrived))
	return nil
}

// Texts of the client sandbox's EventSandbox events (Event.Sandbox
// carries the details).
const (
	// SandboxConnected: the request runs in its client sandbox.
	SandboxConnected = "connected"
	// SandboxFileWritten: the agent's Write, Edit, MultiEdit or
	// NotebookEdit call succeeded.
	SandboxFileWritten = "file_written"
	// SandboxExec: the agent's Bash call ended.
	SandboxExec = "exec"
)

// maxEventCommand bounds the command an exec event repeats.
const maxEventCommand = 1 << 10

// exitCodeRe finds the exit code Claude Code puts first in a failed Bash
// result ("Exit code 3\n...").
var exitCodeRe = regexp.MustCompile(`^Exit code (\d{1,3})\b`)

// lifecycle turns the agent's tool events into the client sandbox's
// lifecycle events: a write tool's success is file_written, a Bash
// call's end is exec with its exit code (0 when the CLI reported no
// error; absent when it reported an error without a code). It returns
// nil for other events. Held: emitMu.
func (r *run) lifecycle(ev executor.Event) *executor.Event {
	switch {
	case ev.Kind == executor.EventToolUse && ev.Tool != nil:
		switch ev.Tool.Name {
		case "Write", "Edit", "MultiEdit", "NotebookEdit", "Bash":
			if r.toolUses == nil {
				r.toolUses = map[string]*executor.ToolUse{}
			}
			if len(r.toolUses) < 1024 {
				r.toolUses[ev.Tool.ID] = ev.Tool
			}
		}
	case ev.Kind == executor.EventToolResult && ev.ToolResult != nil:
		use := r.toolUses[ev.ToolResult.ToolUseID]
		if use == nil {
			return nil
		}
		delete(r.toolUses, ev.ToolResult.ToolUseID)
		var in struct {
			FilePath     string `json:"file_path"`
			NotebookPath string `json:"notebook_path"`
			Command      string `json:"command"`
		}
		_ = json.Unmarshal(use.Input, &in) // a malformed input leaves the fields empty
		if use.Name != "Bash" {
			if ev.ToolResult.IsError {
				return nil
			}
			return &executor.Event{Kind: executor.EventSandbox, Text: SandboxFileWritten,
				Sandbox: &executor.SandboxInfo{Path: cmp.Or(in.FilePath, in.NotebookPath)}}
		}
		info := &executor.SandboxInfo{Command: in.Command}
		if len(info.Command) > maxEventCommand {
			info.Command = strings.ToValidUTF8(info.Command[:maxEventCommand], "")
		}
		if !ev.ToolResult.IsError {
			info.ExitCode = new(int)
		} else if m := exitCodeRe.FindStringSubmatch(ev.ToolResult.Content); m != nil {
			code, _ := strconv.Atoi(m[1])
			info.ExitCode = &code
		}
		return &executor.Event{Kind: executor.EventSandbox, Text: SandboxExec, Sandbox: info}
	}
	return nil
}
