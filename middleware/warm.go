package middleware

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// The session policy (an assistant's sandbox.policy "session", which sets
// Spec.IdleTTL): after a good turn the chat's container is kept, idle,
// instead of removed, and the next turn of the same chat and assistant
// with the same effective options (warmKey) runs in it. Right after the
// turn, off the request's path, the container is made as a fresh one
// would be (processes the agent left are killed, HOME is rebuilt from the
// assistant's home files and the stored session transcript), and the next
// turn's CLI is started with --resume and the same flags, waiting on
// stdin: the next request only writes its message (preCLI). The waiting
// CLI is warmed up first (warmUp): it makes one model call, which the
// model router answers itself between requests, so that the work of a
// first call in a new process is done before the message. The kept
// container is idle, not paused: a paused container's helper would not
// answer, and unpausing is a daemon call on the warm turn's path. Idle is
// not 0 CPU: the CLI's start costs about 2 s of CPU right after the turn,
// then the waiting CLI's timers take about 3.5% of a core (cgroup
// cpu.stat over 20 s on a 2-core machine at load 23; TestE2ESessionIdleCPU).
//
// The chat's leases (ours and the executor's) are held per request, as
// for the request policy: a kept container holds none (executor/docker's
// Sandbox.Park). After IdleTTL without a request it is removed (the
// workspace and the session stay); Close removes every kept container;
// a gateway killed with kept containers leaves them to the executor's
// takeover and reconciler, which remove a dead owner's containers. A kept
// container counts toward the admission's memory bound, not toward its
// run slots; when memory is short, idle containers are removed, oldest
// first.

// chatID is a user's chat, the key of its lease and of its kept container.
type chatID struct{ user, chat string }

// key is the chat's lease key (as the executors key it).
func (c chatID) key() string { return c.user + "/" + c.chat }

// warmUpRunner is a runner whose CLI, started and waiting for its message,
// can do the work of a first model call beforehand (claude.Runner).
type warmUpRunner interface {
	// WarmUp returns the line that starts the warm-up on the CLI's stdin
	// and end, which takes the CLI's stdout lines one at a time: true at
	// the warm-up's end (with an error when the CLI refused it, which
	// leaves the CLI as it was), an error with false for a line that
	// makes the CLI unfit for a request.
	WarmUp() (line []byte, end func(line []byte) (bool, error))
}

// warmUpTimeout bounds a pre-started CLI's start and warm-up; past it the
// CLI is discarded and the next turn starts one itself.
const warmUpTimeout = time.Minute

// maxWarmUpLine caps a line the CLI writes during its warm-up.
const maxWarmUpLine = 1 << 20

// NewRouteToken returns a fresh per-request key for a sandbox's model
// route.
func NewRouteToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("middleware: per-request token: %w", err)
	}
	return "abx-" + hex.EncodeToString(b[:]), nil
}

// SessionLife is the least life of a session container (its Spec.Timeout
// is raised to it, or to the assistant's timeout plus idle_ttl when that
// is longer): past it the container ends by itself even without a
// gateway. A turn reuses a kept container only when a whole sandbox
// timeout still fits in its life; otherwise it starts a new one.
const SessionLife = 2 * time.Hour

// warmReclaimWait is how soon an expiry retries while a request holds
// the chat.
const warmReclaimWait = time.Second

// warmKey hashes what a kept container was made for: the sandbox spec,
// the runner's template (system prompt, model, arguments, tools, MCP
// configuration), the files and HOME. A kept container is reused only for
// an equal key; any change of the assistant's options makes a new one.
func warmKey(a *Assistant) string {
	sb := a.Sandbox
	spec := sb.Spec
	spec.UserID, spec.ChatID, spec.AssistantID = "", "", ""
	run := sb.Run
	run.Messages = nil
	key := struct {
		ID, Runner, Home, Upstream string
		KeyHash                    [32]byte
		Spec                       executor.Spec
		Run                        executor.RunRequest
		Files, HomeFiles           map[string][]byte
		Direct                     bool
		Stall                      time.Duration
		MaxOutput                  int64
	}{a.ID, sb.Runner, sb.Home, sb.Connector.Upstream, sha256.Sum256([]byte(sb.Connector.Key)), spec, run, sb.Files, sb.HomeFiles,
		sb.DirectModel, sb.StallTimeout, sb.MaxOutput}
	b, err := json.Marshal(key)
	if err != nil {
		// Arguments that do not marshal: never reuse.
		return "unhashable:" + newSessionID()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// warmEntry is a kept container, parked, and what was started in it.
type warmEntry struct {
	chat      chatID
	assistant string
	key       string
	sb        executor.Sandbox
	lifeEnd   time.Time
	memory    int64
	// homeSession is the session whose transcript HOME holds.
	homeSession string
	pre         *preCLI
	keptAt      time.Time
	timer       *time.Timer
}

// warmPool holds the kept containers, one per chat.
type warmPool struct {
	o       *Orchestrator
	mu      sync.Mutex
	entries map[chatID]*warmEntry
	closed  bool
	wg      sync.WaitGroup // removals under way
}

func newWarmPool(o *Orchestrator) *warmPool {
	return &warmPool{o: o, entries: make(map[chatID]*warmEntry)}
}

// take removes the chat's kept container from the pool and returns it,
// or nil. The caller holds the chat's lease.
func (p *warmPool) take(chat chatID) *warmEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[chat]
	if e == nil {
		return nil
	}
	p.drop(e)
	return e
}

// drop removes e from the pool. Held: mu.
func (p *warmPool) drop(e *warmEntry) {
	delete(p.entries, e.chat)
	if e.timer != nil {
		e.timer.Stop()
	}
	if q := p.o.adm; q != nil {
		q.idle(-e.memory)
	}
}

// put keeps e until ttl passes without a request; false when the pool is
// closed (the caller removes the container).
func (p *warmPool) put(e *warmEntry, ttl time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.entries[e.chat] != nil {
		return false
	}
	p.entries[e.chat] = e
	e.keptAt = time.Now()
	e.timer = time.AfterFunc(ttl, func() { p.expire(e) })
	if q := p.o.adm; q != nil {
		q.idle(e.memory)
	}
	return true
}

// expire removes e after its idle time to live, under the chat's lease so
// that no request of the chat starts on it meanwhile.
func (p *warmPool) expire(e *warmEntry) {
	release, err := p.o.leases.Acquire(context.Background(), e.chat.key(), 0)
	ok := err == nil
	p.mu.Lock()
	if p.entries[e.chat] != e {
		p.mu.Unlock()
		if ok {
			release()
		}
		return
	}
	if !ok {
		// A request holds the chat: it takes e, or e expires a little
		// later.
		e.timer.Reset(warmReclaimWait)
		p.mu.Unlock()
		return
	}
	p.drop(e)
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer release()
	p.o.removeWarm(e, "idle_ttl passed")
}

// has reports whether the chat has a kept container.
func (p *warmPool) has(chat chatID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.entries[chat] != nil
}

// touch restarts the idle time to live of the chat's kept container, if
// any, at ttl (a client sandbox's heartbeat).
func (p *warmPool) touch(chat chatID, ttl time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.entries[chat]; e != nil && e.timer != nil {
		e.timer.Reset(ttl)
	}
}

// evict removes the chat's kept container, if any, under the chat's lease
// (waiting for a request that holds it, up to ctx).
func (p *warmPool) evict(ctx context.Context, chat chatID, why string) {
	release, err := p.o.leases.Acquire(ctx, chat.key(), p.o.opts.TeardownTimeout)
	if err != nil {
		return // the request holding it will not keep it (sandboxes.go live)
	}
	defer release()
	if e := p.take(chat); e != nil {
		p.wg.Add(1)
		defer p.wg.Done()
		p.o.removeWarm(e, why)
	}
}

// reclaim removes the oldest kept container to make room in memory for a
// run; it reports whether it found one.
func (p *warmPool) reclaim() bool {
	p.mu.Lock()
	var oldest *warmEntry
	for _, e := range p.entries {
		if oldest == nil || e.keptAt.Before(oldest.keptAt) {
			oldest = e
		}
	}
	p.mu.Unlock()
	if oldest == nil {
		return false
	}
	release, err := p.o.leases.Acquire(context.Background(), oldest.chat.key(), 0)
	ok := err == nil
	if !ok {
		return false
	}
	p.mu.Lock()
	if p.entries[oldest.chat] != oldest {
		p.mu.Unlock()
		release()
		return false
	}
	p.drop(oldest)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer release()
		p.o.removeWarm(oldest, "the admission needs its memory for a run")
	}()
	return true
}

// close removes every kept container and refuses new ones.
func (p *warmPool) close() {
	p.mu.Lock()
	p.closed = true
	list := slices.Collect(maps.Values(p.entries))
	for _, e := range list {
		p.drop(e)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.o.removeWarm(e, "the gateway shuts down")
		}()
	}
	wg.Wait()
	p.wg.Wait()
}

// removeWarm removes a kept container: its pre-started CLI, then the
// container (the workspace and the session stay).
func (o *Orchestrator) removeWarm(e *warmEntry, why string) {
	t0 := time.Now()
	e.pre.discard(o.opts.TeardownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), o.opts.TeardownTimeout)
	defer cancel()
	err := e.sb.Close(ctx)
	o.tel.live.Add(-1)
	log := o.log.With("user", e.chat.user, "chat", e.chat.chat, "assistant", e.assistant, "id", e.sb.ID(), "reason", why)
	if err != nil {
		log.Error("removing a kept session container failed; the executor's reconciler removes it later", "error", err)
		return
	}
	log.Debug("kept session container removed", "took", time.Since(t0))
}

// preCLI is the next turn's CLI, started right after a turn and waiting
// on stdin for its message.
type preCLI struct {
	// inv is what it was started with (no stdin): used only for a request
	// whose own invocation is the same.
	inv     executor.Invocation
	token   string
	session string
	// fresh: started for a new session (a pre-warmed client sandbox),
	// not resuming one.
	fresh bool
	proc  *agentProc
	// tools is the gateway's tool session the CLI's MCP server connected
	// to at its start, opened for the chat's next request; that request
	// takes it (openTools), and the relay then sends its shell calls to
	// that run. Nil when the assistant uses no gateway tool.
	tools      ToolSession
	toolsRelay *toolRelay
	toolsFor   string // the user and chat the tool session serves; "" for a fresh CLI's, bound when a chat adopts it
	// warmed is closed when the CLI's warm-up has ended (at once when it
	// has none); then spoiled says whether it left the CLI unfit for a
	// request.
	warmed  chan struct{}
	spoiled error
}

// preCLI is e's pre-started CLI; nil for a nil e.
func (e *warmEntry) preCLI() *preCLI {
	if e == nil {
		return nil
	}
	return e.pre
}

// toolRelay hands the shell tool calls of a tool session opened before its
// request to the run that took the session.
type toolRelay struct {
	mu sync.Mutex
	to func(ToolCall)
}

func (t *toolRelay) call(c ToolCall) {
	t.mu.Lock()
	to := t.to
	t.mu.Unlock()
	if to != nil {
		to(c)
	}
}

func (t *toolRelay) set(to func(ToolCall)) {
	t.mu.Lock()
	t.to = to
	t.mu.Unlock()
}

// discard stops the CLI and waits for it and its warm-up up to wait, and
// closes the tool session no request took. It is safe on nil.
func (p *preCLI) discard(wait time.Duration) {
	if p == nil {
		return
	}
	if p.tools != nil {
		_ = p.tools.Close()
		p.tools = nil
	}
	p.proc.cancel()
	_ = p.proc.stdin.Close()
	_ = p.proc.stdout.CloseWithError(errParserDone)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.warmed:
	case <-t.C:
		return
	}
	select {
	case <-p.proc.done:
	case <-t.C:
	}
}

// ready waits for the CLI's warm-up to end, up to ctx, and reports whether
// the CLI can take a request.
func (p *preCLI) ready(ctx context.Context) error {
	select {
	case <-p.warmed:
		return p.spoiled
	case <-ctx.Done():
		return fmt.Errorf("the request ended during the pre-started CLI's warm-up: %w", context.Cause(ctx))
	}
}

// exited reports whether the CLI ended while it waited.
func (p *preCLI) exited() bool {
	select {
	case out := <-p.proc.done:
		p.proc.done <- out
		return true
	default:
		return false
	}
}

// sameStart reports whether inv starts the CLI exactly as p was started.
func (p *preCLI) sameStart(inv executor.Invocation) bool {
	return slices.Equal(p.inv.Args, inv.Args) && slices.Equal(p.inv.Env, inv.Env) &&
		maps.EqualFunc(p.inv.Files, inv.Files, bytes.Equal)
}

// resetScript stops every process in the container but init, the main
// process (the lowest other pid) and the script's own ancestry, then
// empties HOME ($1): what the agent left behind must not reach the next
// turn, as it could not with a new container.
const resetScript = `home=$1
ppid() { while read -r k v; do [ "$k" = PPid: ] && { echo "$v"; return; }; done < "/proc/$1/status"; echo 0; }
keep=" 1 $$ "; p=$$
while [ "$p" -gt 1 ]; do p=$(ppid "$p") || break; keep="$keep$p "; done
main=0
for d in /proc/[0-9]*; do n=${d#/proc/}; [ "$n" -gt 1 ] && { [ "$main" -eq 0 ] || [ "$n" -lt "$main" ]; } && main=$n; done
keep="$keep$main "
for d in /proc/[0-9]*; do n=${d#/proc/}; case "$keep" in *" $n "*) ;; *) kill -9 "$n" 2>/dev/null;; esac; done
find "$home" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 4
`

// resetContainer stops what the agent left running and rebuilds HOME:
// the assistant's home files and the chat's stored session transcript.
func (r *run) resetContainer(ctx context.Context, e *warmEntry) error {
	var stderr bytes.Buffer
	res, err := r.sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", resetScript, "sh", r.home()}, Stderr: &stderr, Timeout: r.o.opts.TeardownTimeout})
	switch {
	case err != nil:
		return err
	case res.ExitCode != 0:
		return fmt.Errorf("the reset exited with code %d: %s", res.ExitCode, bytes.TrimSpace(stderr.Bytes()))
	}
	files := maps.Clone(r.a.Sandbox.HomeFiles)
	if cs := r.session; cs != nil {
		rec, transcript, err := (&sessionStore{dir: r.o.opts.SessionDir}).load(cs.dir)
		if err == nil && rec != nil && rec.SessionID == cs.id {
			if files == nil {
				files = map[string][]byte{}
			}
			files[cs.file] = transcript
			e.homeSession = cs.id
		}
	}
	return executor.PlaceHomeFiles(ctx, r.sb, r.home(), files)
}

// preStart starts the next turn's CLI resuming the chat's session, or
// returns nil when it cannot (no session kept, no model route this turn).
// When the assistant uses the gateway's tools, their session for the next
// request opens first, with the chat's identity, so that the CLI's MCP
// server connects to it at start.
func (r *run) preStart(e *warmEntry) (pre *preCLI) {
	cs := r.session
	runner := r.o.runners[r.a.Sandbox.Runner]
	fresh := cs == nil && r.prewarming
	if runner == nil || !fresh && (cs == nil || e.homeSession != cs.id) {
		return nil
	}
	if fresh {
		// A pre-warmed client sandbox: a CLI for a new session, which the
		// first request of a chat without a session adopts (openSession).
		sr, ok := runner.(sessionRunner)
		if r.o.opts.SessionDir == "" || !ok || !sr.SessionsEnabled(r.runRequest()) {
			return nil
		}
	}
	var tools ToolSession
	var relay *toolRelay
	if r.o.opts.Tools != nil && r.o.opts.Tools.Serves(r.a.Sandbox.Run.AllowedTools) {
		// A fresh CLI's session opens without a chat, which a pre-warmed
		// sandbox's first request chooses and binds (openTools); it
		// refuses every call until then.
		chat := r.req.ChatID
		if fresh {
			chat = ""
		}
		relay = &toolRelay{}
		var err error
		if tools, err = r.openToolSession(r.sb, chat, relay.call); err != nil || tools == nil {
			r.log.Debug("no tool session for the next turn; its CLI starts with the request", "error", err)
			return nil
		}
		defer func() {
			if pre == nil {
				_ = tools.Close()
			}
		}()
	}
	rr := r.runRequest()
	var tok string
	if !r.a.Sandbox.DirectModel && r.o.models != nil {
		// The next turn's route, for this token, is in the same sandbox:
		// where this turn's agent reached the model.
		var err error
		if tok, err = NewRouteToken(); err != nil || r.modelBase == "" {
			return nil
		}
		rr.ModelBaseURL, rr.APIKey = r.modelBase, tok
	}
	if fresh {
		rr.Messages = []executor.Message{{Role: "user", Content: "."}}
		rr.SessionID = newSessionID()
	} else {
		rr.Messages = append(slices.Clone(r.messages), executor.Message{Role: "assistant", Content: r.answer}, executor.Message{Role: "user", Content: "."})
		rr.SessionID, rr.Resume = cs.id, true
	}
	inv, err := runner.Invocation(rr)
	if err != nil {
		return nil
	}
	inv.Stdin = nil
	ctx := context.Background()
	if err := r.writeFiles(ctx, inv.Files, "the runner's file"); err != nil {
		return nil
	}
	pr, pw := io.Pipe()
	proc := r.startProc(ctx, inv, pr, time.Until(e.lifeEnd))
	proc.stdin = pw
	pre = &preCLI{inv: inv, token: tok, session: rr.SessionID, fresh: fresh, proc: proc, tools: tools, toolsRelay: relay,
		toolsFor: r.req.UserID + "/" + r.req.ChatID, warmed: make(chan struct{})}
	if fresh {
		pre.toolsFor = ""
	}
	wu, canWarm := runner.(warmUpRunner)
	if !canWarm || tok == "" {
		close(pre.warmed)
		return pre
	}
	go r.warmUp(pre, wu)
	return pre
}

// warmUp has the pre-started CLI do a first model call's work before its
// message, against a warm-up route that answers the call itself: a warm
// turn's first model call then leaves sooner. A warm-up that cannot start
// leaves the CLI as it was; one that fails on the way spoils it (the next
// turn discards it). It closes pre.warmed when done.
func (r *run) warmUp(pre *preCLI, wu warmUpRunner) {
	defer close(pre.warmed)
	defer func() {
		if pre.spoiled != nil {
			// Nothing it does may run on between turns.
			pre.proc.cancel()
		}
	}()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(withIdentity(context.Background(), r.req.UserID, r.req.ChatID), warmUpTimeout)
	defer cancel()
	route, err := r.o.models.OpenWarmUp(ctx, r.sb, r.a, pre.token)
	if err != nil {
		r.log.Debug("no warm-up for the pre-started CLI", "error", err)
		return
	}
	defer func() { _ = route.Close() }()
	// A CLI that does not answer in time has its pipes cut, which ends
	// the reads and writes below.
	defer context.AfterFunc(ctx, func() {
		_ = pre.proc.stdin.CloseWithError(context.Cause(ctx))
		_ = pre.proc.stdout.CloseWithError(context.Cause(ctx))
	})()
	line, end := wu.WarmUp()
	if _, err := pre.proc.stdin.Write(line); err != nil {
		pre.spoiled = fmt.Errorf("the warm-up could not be written: %w", err)
		return
	}
	for {
		l, err := readLine(pre.proc.stdout, maxWarmUpLine)
		if err != nil {
			pre.spoiled = fmt.Errorf("the CLI's output during its warm-up: %w", err)
			return
		}
		done, err := end(l)
		switch {
		case done && err != nil:
			r.log.Info("the pre-started CLI refused its warm-up; it takes its message without one", "error", err)
			return
		case done:
			r.log.Debug("the pre-started CLI is warmed up", "took", time.Since(t0))
			return
		case err != nil:
			pre.spoiled = err
			return
		}
	}
}

// readLine reads one line from rd, without its newline and without reading
// past it.
func readLine(rd io.Reader, limit int) ([]byte, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			return line, nil
		}
		if len(line) >= limit {
			return nil, fmt.Errorf("a line is longer than %d bytes", limit)
		}
		line = append(line, b[0])
	}
}

// openWarmRoute opens the model route of a turn in a kept container: for
// the pre-started CLI's token when there is one and the router can.
func (r *run) openWarmRoute(ctx context.Context) (ModelRoute, error) {
	if pre := r.warm.pre; pre != nil && pre.token != "" {
		route, err := r.o.models.OpenToken(ctx, r.sb, r.a, pre.token)
		if !errors.Is(err, errors.ErrUnsupported) {
			return route, err
		}
		r.log.Debug("the model router takes no token chosen beforehand; the turn starts its own CLI", "error", err)
		pre.discard(r.o.opts.TeardownTimeout)
		r.warm.pre = nil
	}
	return r.o.models.Open(ctx, r.sb, r.a)
}

// usePre hands the request's message to the pre-started CLI when the
// request starts it exactly as it was started; otherwise the pre-started
// CLI is stopped and nil returned.
func (r *run) usePre(inv executor.Invocation) *agentProc {
	e := r.warm
	if e == nil || e.pre == nil {
		return nil
	}
	pre := e.pre
	e.pre = nil
	if pre.toolsRelay != nil && pre.tools != nil {
		// Its MCP server is connected to a session this run did not take.
		pre.discard(r.o.opts.TeardownTimeout)
		return nil
	}
	if !pre.sameStart(inv) {
		r.log.Debug("the turn starts the CLI differently (its system prompt, tools, model or session changed); the pre-started CLI is replaced")
		pre.discard(r.o.opts.TeardownTimeout)
		return nil
	}
	r.log.Debug("the pre-started CLI takes the turn's message", "waited", time.Since(e.keptAt), "since_arrival", time.Since(r.arrived))
	go func() {
		_, err := pre.proc.stdin.Write(inv.Stdin)
		pre.proc.stdin.CloseWithError(err)
	}()
	return pre.proc
}
