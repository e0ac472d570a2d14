package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Where a run's sandbox comes from and where it goes back.
//
// A run gets its sandbox from acquire and gives it back through the
// release acquire returns; nothing else in a run decides where its
// sandbox comes from. The sources, in the order acquire consults them:
// the chat's lease (the chat's place, or its client sandbox's: one run
// per place at a time), the chat's kept container when the run may
// continue in it (session policy, client sandboxes), a run slot of the
// admission control, and else the executor's Create (whose own pool may
// hand out a container started ahead). release keeps the container for
// the chat's next turn or removes it, then frees the slot, then the lease.

// errWarmAlready ends a prewarm whose place has its container kept
// already: there is nothing to start.
var errWarmAlready = errors.New("middleware: the sandbox is warm already")

// acquire places the run: the lease of its place (waiting up to the
// sandbox's LeaseWait and no longer than the admission deadline), the
// place's kept container when the run may continue in it, a run slot, and
// then that container or a new one, with the run's routes open in it. It
// returns what gives it all back after the response, given the run's
// outcome: nil when there is nothing to give back (the lease was not
// taken), else a function that is to be called also when acquire failed
// half way. A prewarm whose place is warm already gets errWarmAlready.
func (r *run) acquire(ctx context.Context) (release func(outcome error), err error) {
	var deadline time.Time
	if r.o.adm != nil {
		// The queue's deadline counts from arrival: the lease wait is
		// part of the wait, not on top of it.
		deadline = r.arrived.Add(r.o.adm.cfg.MaxWait)
	}
	r.enter("lease")
	unlease, err := r.lease(ctx, deadline)
	if err != nil {
		return nil, err
	}
	r.takeWarm()
	if r.prewarming && r.warm != nil {
		r.giveBackWarm()
		return func(error) { unlease() }, errWarmAlready
	}
	r.enter("queue")
	free, err := r.admit(ctx, deadline)
	if err != nil {
		r.giveBackWarm()
		return func(error) { unlease() }, err
	}
	release = func(outcome error) {
		if r.sb != nil {
			r.windUp(ctx, outcome)
		}
		free() // after the teardown: the slot covers the container
		unlease()
	}
	// Before the sandbox starts, with no agent process in the workspace:
	// it follows the request's history back when that returns to an
	// earlier point.
	r.rewind(ctx)
	r.enter("container_start")
	return release, r.start(ctx)
}

// lease takes the chat's lease, waiting up to the sandbox's LeaseWait and
// no later than the admission deadline.
func (r *run) lease(ctx context.Context, deadline time.Time) (func(), error) {
	t0 := time.Now()
	wait := r.a.Sandbox.Spec.LeaseWait
	if r.o.adm != nil {
		wait = min(wait, time.Until(deadline))
	}
	release, err := r.o.leases.Acquire(ctx, r.place.key(), wait)
	r.t.Lease = time.Since(t0)
	switch {
	case errors.Is(err, executor.ErrBusy) && r.client != nil:
		return nil, Errorf(KindBusy, executor.ErrBusy, "the sandbox %q is busy with another request; wait for it to finish and send again", r.client.ID)
	case errors.Is(err, executor.ErrBusy):
		return nil, Errorf(KindBusy, executor.ErrBusy, "the chat %q is busy with another request; wait for it to finish and send again", r.req.ChatID)
	case err != nil:
		return nil, r.failure(ctx, err, AsError(err))
	}
	return release, nil
}

// admit waits for a run slot of the admission control until deadline,
// telling a streaming client where it stands. The returned function frees
// the slot.
func (r *run) admit(ctx context.Context, deadline time.Time) (func(), error) {
	q := r.o.adm
	if q == nil {
		return func() {}, nil
	}
	t0 := time.Now()
	free, err := q.acquire(ctx, r.req.UserID, r.a.Sandbox.Spec.MemoryBytes, deadline, func(qi executor.QueueInfo) error {
		return r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxQueued, Queue: &qi})
	})
	r.t.Queue = time.Since(t0)
	if err != nil {
		if KindOf(err) == KindOverloaded {
			return nil, err
		}
		return nil, r.failure(ctx, err, AsError(err))
	}
	return free, nil
}

// create is executor.Executor.Create within a start slot of the admission
// control.
func (r *run) create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	if q := r.o.adm; q != nil {
		done, err := q.startSlot(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
	}
	return r.o.exec.Create(ctx, spec)
}

// start creates the sandbox, or takes the chat's kept one, and opens the
// model route.
func (r *run) start(ctx context.Context) error {
	t0 := time.Now()
	if r.warm != nil && r.startWarm(ctx) {
		r.t.ContainerStart = time.Since(t0)
		r.log.Debug("continuing in the chat's kept container", "id", r.sb.ID(), "pre_started", r.warm.pre != nil, "took", r.t.ContainerStart)
		return r.open(ctx)
	}
	spec := sessionSpec(r.a.Sandbox.Spec)
	spec.UserID, spec.ChatID, spec.AssistantID = r.place.user, r.place.chat, r.a.ID
	sb, err := r.create(ctx, spec)
	r.t.ContainerStart = time.Since(t0)
	if err != nil {
		switch {
		case errors.Is(err, executor.ErrBusy):
			return Errorf(KindBusy, err, "the chat %q is busy with another request (possibly on another gateway instance); wait for it to finish and send again", r.req.ChatID)
		case errors.Is(err, executor.ErrNoSpace):
			return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox cannot start: its workspace is over its disk or inode quota, or the gateway's disk is nearly full; delete files in the workspace or raise sandbox.max_disk / max_inodes (operators: free disk space)"))
		case errors.Is(err, executor.ErrUnavailable):
			return r.failure(ctx, err, Errorf(KindUnavailable, err, "the gateway's container runtime does not answer, so no sandbox can start; send the request again later (operators: start dockerd)"))
		case errors.Is(err, executor.ErrInvalid):
			return r.failure(ctx, err, Errorf(KindConfig, err, "the assistant's sandbox settings were refused; the gateway's log has the details"))
		}
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox could not start; the gateway's log has the details"))
	}
	r.sb, r.lifeEnd = sb, sb.Deadline()
	r.o.tel.live.Add(1)
	r.log.Debug("sandbox ready", "id", sb.ID(), "took", r.t.ContainerStart)
	return r.open(ctx)
}

// windUp closes the run's routes, waits for the agent CLI's exit, saves
// the chat's session, and keeps the sandbox for the chat's next turn when
// the session policy allows, or removes it. It runs after the response:
// the CLI's exit (30-80 ms after its result) and the transcript's copy
// are not on the request's path, and the chat's next request waits for
// the lease, which is released after windUp.
func (r *run) windUp(ctx context.Context, err error) {
	// The turn is answered: no model or tool call of the CLI is
	// legitimate any more, and none may run unmetered by the response
	// while it exits (the agent can reach its CLI's stdin through /proc
	// and queue another prompt).
	r.closeRoutes()
	if r.exited != nil {
		r.exited()
	}
	if r.answered {
		r.saveSession(ctx, r.session, r.answer)
	}
	if !r.keepable(err) || !r.keep(ctx) {
		r.teardown(ctx)
	}
	// No agent process runs now: the container is gone, or kept after
	// its reset.
	r.checkpointTurn(ctx)
}

// teardown closes the sandbox (windUp has closed the run's routes) on a
// context the caller cannot cancel, bounded by TeardownTimeout.
func (r *run) teardown(ctx context.Context) {
	t0 := time.Now()
	r.endPhase()
	_, span := r.o.tel.tracer.Start(r.tr.ctx, "agentbox.teardown")
	defer span.End()
	defer r.o.tel.live.Add(-1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.opts.TeardownTimeout)
	defer cancel()
	if r.warm != nil {
		r.warm.pre.discard(r.o.opts.TeardownTimeout)
	}
	if err := r.sb.Close(ctx); err != nil {
		r.log.Error("removing the sandbox failed; the executor's reconciler removes it later", "id", r.sb.ID(), "error", err)
	}
	r.t.Teardown = time.Since(t0)
	_ = r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxClosed})
}

// takeWarm takes the chat's kept container when the request may run in
// it; a kept container made for another assistant or other options is
// removed first (a new container must not meet it on the workspace).
func (r *run) takeWarm() {
	e := r.o.pool.take(r.place)
	if e == nil {
		return
	}
	switch {
	case e.assistant != r.a.ID:
		r.o.removeWarm(e, "the chat's next request is for another assistant")
	case e.key != warmKey(r.a):
		r.o.removeWarm(e, "the assistant's options changed")
	case time.Until(e.lifeEnd) < r.a.Sandbox.Spec.Timeout:
		r.o.removeWarm(e, "a whole sandbox timeout no longer fits in the container's life")
	default:
		r.warm = e
		return
	}
	r.log.Debug("the chat's kept container was removed; starting a new one")
}

// giveBackWarm returns an unused kept container to the pool (the request
// failed before it started).
func (r *run) giveBackWarm() {
	e := r.warm
	if e == nil {
		return
	}
	r.warm = nil
	if !r.o.pool.put(e, r.a.Sandbox.Spec.IdleTTL) {
		r.o.removeWarm(e, "the gateway shuts down")
	}
}

// startWarm continues in the kept container: it takes the chat again
// (executor lease) and reports false, having removed the container, when
// that fails.
func (r *run) startWarm(ctx context.Context) bool {
	e := r.warm
	if err := e.sb.(executor.Keeper).Unpark(ctx, r.a.Sandbox.Spec.LeaseWait); err != nil {
		r.warm = nil
		r.log.Info("the chat's kept container cannot continue; starting a new one", "id", e.sb.ID(), "error", err)
		r.o.removeWarm(e, "it could not be taken again")
		return false
	}
	r.sb, r.lifeEnd = e.sb, e.lifeEnd
	pre := e.pre
	if pre == nil {
		return true
	}
	// Its warm-up answers on the model socket, where the turn's route is
	// about to listen: it must have ended.
	err := pre.ready(ctx)
	if err == nil && pre.exited() {
		err = errors.New("it ended while it waited")
	}
	if err == nil {
		return true
	}
	r.log.Info("the pre-started CLI cannot take the turn; resetting the container for a new one", "error", err)
	pre.discard(r.o.opts.TeardownTimeout)
	e.pre = nil
	// What that CLI did may have reached HOME (a turn of its own in the
	// session's transcript): the new CLI must find HOME as the last
	// turn left it.
	e.homeSession = ""
	if err := r.resetContainer(ctx, e); err != nil {
		r.warm = nil
		r.log.Warn("the chat's kept container could not be reset; starting a new one", "id", e.sb.ID(), "error", err)
		r.o.removeWarm(e, "it could not be reset")
		return false
	}
	return true
}

// sessionSpec is the spec of a session container: its life is long enough
// for several turns and the idle times between them.
func sessionSpec(spec executor.Spec) executor.Spec {
	if spec.IdleTTL > 0 {
		spec.Timeout = max(SessionLife, spec.Timeout+spec.IdleTTL)
	}
	return spec
}

// keepable reports whether the run's container may be kept after the
// outcome err.
func (r *run) keepable(err error) bool {
	if err != nil || r.sb == nil || r.a.Sandbox.Spec.IdleTTL <= 0 {
		return false
	}
	if r.client != nil && !r.o.sandboxes.live(r.client) {
		return false // deleted or stopped during the request
	}
	// What the backend declared at New; its conformance suite holds it to
	// it, and a wrapper that hides Keeper only loses the keeping.
	_, ok := r.sb.(executor.Keeper)
	return r.o.caps.Keep && ok && time.Until(r.lifeEnd) >= r.a.Sandbox.Spec.Timeout
}

// keep parks the run's container for the chat's next turn (windUp has
// closed the run's model route and tools): it resets the container,
// pre-starts the next turn's CLI and puts it in the pool. It reports false
// when the container must be removed instead.
func (r *run) keep(ctx context.Context) bool {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.opts.TeardownTimeout)
	defer cancel()
	e := &warmEntry{chat: r.place, assistant: r.a.ID, key: warmKey(r.a), sb: r.sb, lifeEnd: r.lifeEnd,
		memory: r.a.Sandbox.Spec.MemoryBytes}
	if e.memory <= 0 {
		e.memory = defaultRunMemory
	}
	if err := r.resetContainer(ctx, e); err != nil {
		r.log.Warn("the container could not be reset for the next turn; removing it", "error", err)
		return false
	}
	e.pre = r.preStart(e)
	if err := r.sb.(executor.Keeper).Park(); err != nil {
		e.pre.discard(r.o.opts.TeardownTimeout)
		r.log.Warn("the container could not be kept; removing it", "error", err)
		return false
	}
	if !r.o.pool.put(e, r.a.Sandbox.Spec.IdleTTL) {
		e.pre.discard(r.o.opts.TeardownTimeout)
		return false
	}
	r.t.Teardown = time.Since(t0)
	r.log.Debug("container kept for the chat's next turn", "id", r.sb.ID(), "pre_started", e.pre != nil, "idle_ttl", r.a.Sandbox.Spec.IdleTTL, "took", r.t.Teardown)
	return true
}
