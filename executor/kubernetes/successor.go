package kubernetes

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// Successors (Options.Successors) start a chat's next pod before its next
// request. Under the request policy every turn gets a new pod, and a
// follow-up's pod over the chat's bound claim takes about 600 ms to start,
// most of it the kubelet's volume loops (pool.go), against a container's
// 150. When a chat's sandbox closes, a successor pod of the same
// configuration is started over the chat's claim once the closed pod is
// gone; the chat's next request of that configuration adopts it, a new
// pod as under the request policy (no process, /tmp or HOME of the
// earlier turn), its start already paid.
//
// A successor is the chat's: its pod carries the chat's label, so any
// replica's Create for the chat removes it (removeChatPods) unless this
// executor adopts it first, and it carries LabelPool and the instance's
// label, so that the reconciler and a restarted instance remove it as a
// pooled pod. It is started under the chat's leases, after the closed pod
// is gone, so the workspace never has two pods at work; it runs no
// command and measures no quota until a request adopts it. At most
// Options.Successors wait at once, each at most PoolIdle; a chat whose
// leases another request holds gets none.

// successors is the executor's successor pods, one per chat at most;
// nil without Options.Successors (its methods are then no-ops).
type successors struct {
	e *Executor
	*executor.Pool[successorPlan, *poolEntry]
	// ctx ends when the executor closes: a fill waiting for a chat's
	// leases, which an open sandbox holds, must not hold Close up.
	ctx  context.Context
	stop context.CancelFunc
}

// successorPlan is a successor's plan and the pod it follows.
type successorPlan struct {
	plan
	after string
}

func (e *Executor) openSuccessors() *successors {
	if e.o.Successors == 0 {
		return nil
	}
	sp := &successors{e: e}
	sp.ctx, sp.stop = context.WithCancel(e.bg)
	sp.Pool = executor.NewPool(executor.PoolConfig[successorPlan, *poolEntry]{
		Size: 1, Total: e.o.Successors, Idle: e.o.PoolIdle, Start: sp.start,
		Drop: sp.drop, Failed: e.fillFailed("successor"),
	})
	return sp
}

// follow starts a successor for the request-policy sandbox s, which is
// closing, in the background.
func (sp *successors) follow(s *Sandbox) {
	if sp == nil || s.plan.spec.IdleTTL > 0 || s.plan.claim == "" {
		return
	}
	sp.Refill(s.plan.chat, successorPlan{plan: s.plan, after: s.name})
}

// start makes p's successor pod: once the pod it follows is gone, under
// the chat's leases, a pod over the chat's claim; it returns when the
// pod's helper answers. A chat busy elsewhere, or with a pod at work,
// gets none (an error wrapping ErrBusy).
func (sp *successors) start(s successorPlan, _ string) (_ *poolEntry, err error) {
	e, p := sp.e, s.plan
	ctx, cancel := context.WithTimeout(sp.ctx, e.o.ReadyTimeout+2*e.o.CallTimeout+2*e.o.StopGrace+p.spec.LeaseWait)
	defer cancel()
	closing := func(err error) error {
		if sp.ctx.Err() != nil {
			return fmt.Errorf("%w: %w", executor.ErrNotRunning, err)
		}
		return err
	}
	if err := e.deletePod(ctx, s.after); err != nil {
		return nil, closing(err)
	}
	unlock, err := e.lockChat(ctx, p)
	if err != nil {
		return nil, closing(err)
	}
	defer unlock()
	cctx, ccancel := context.WithTimeout(ctx, e.o.CallTimeout)
	list, err := e.cs.CoreV1().Pods(e.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + p.chat})
	ccancel()
	if err != nil {
		return nil, closing(e.apiError("list pods of the chat", err))
	}
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil {
			return nil, fmt.Errorf("chat %s/%s has pod %s: %w", p.spec.UserID, p.spec.ChatID, pod.Name, executor.ErrBusy)
		}
		// A later request's pod, going: its close asked for a successor
		// too, and this fill is that one.
		if err := e.deletePod(ctx, pod.Name); err != nil {
			return nil, closing(err)
		}
	}
	name := "abx-" + p.chat[:12] + "-" + randomID()[:8]
	done, err := e.sandboxes.Begin(name)
	if err != nil {
		return nil, err
	}
	key := poolKey(p)
	created := time.Now()
	sb := e.waitingSandbox(name, p)
	defer func() {
		if err != nil {
			sb.closePF()
			_ = e.beginDelete(context.WithoutCancel(ctx), name)
			done()
			err = closing(err)
		}
	}()
	pod := e.pod(sb.plan, name)
	pod.Labels[LabelPool] = key
	cctx, ccancel = context.WithTimeout(ctx, e.o.CallTimeout)
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	ccancel()
	if err != nil {
		return nil, e.apiError("create successor pod "+name, err)
	}
	if err := e.waitStarted(ctx, sb); err != nil {
		return nil, fmt.Errorf("successor pod: %w", err)
	}
	e.logger.Debug("successor pod ready", "pod", name, "user", p.spec.UserID, "chat", p.spec.ChatID, "took", time.Since(created))
	return &poolEntry{sb: sb, done: done, started: created, key: key}, nil
}

// adopt returns p's chat's successor pod as its sandbox, or nil when it
// has none, or one of another configuration or that cannot serve (then
// removed; the caller's removeChatPods waits for it to be gone). It is
// called under the chat's leases. The returned sandbox is registered by
// the caller under its pod's name.
func (sp *successors) adopt(ctx context.Context, p plan) *Sandbox {
	if sp == nil {
		return nil
	}
	ent, ok := sp.Take(p.chat)
	if !ok {
		return nil
	}
	if ent.key != poolKey(p) {
		sp.drop(ent, "the chat's request is of another configuration")
		return nil
	}
	sb, err := sp.take(ctx, ent, p)
	if err != nil {
		sp.e.logger.Warn("a successor pod could not take the request; starting a pod of its own", "pod", ent.sb.name, "user", p.spec.UserID, "chat", p.spec.ChatID, "error", err)
		sp.drop(ent, err.Error())
		return nil
	}
	return sb
}

// take checks that ent's pod still has the chat's claim, not being
// deleted, and adopts the pod for p.
func (sp *successors) take(ctx context.Context, ent *poolEntry, p plan) (*Sandbox, error) {
	e, sb := sp.e, ent.sb
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Get(cctx, sb.plan.claim, metav1.GetOptions{})
	switch {
	case err != nil:
		return nil, e.apiError("get the chat's claim "+sb.plan.claim, err)
	case c.DeletionTimestamp != nil || c.Labels[LabelChat] != p.chat:
		return nil, fmt.Errorf("the chat's claim %s is being deleted or is no longer the chat's", c.Name)
	}
	return e.adoptPod(ctx, ent, p, "successor")
}

// drop begins the deletion of ent's pod; the chat's claim stays.
func (sp *successors) drop(ent *poolEntry, why string) {
	ent.sb.stopQuota()
	ent.sb.closePF()
	if err := sp.e.beginDelete(context.Background(), ent.sb.name); err != nil {
		sp.e.logger.Warn("cannot remove a successor pod; the chat's next request or the reconciler removes it", "pod", ent.sb.name, "error", err)
	}
	ent.done()
	sp.e.logger.Debug("successor pod removed", "pod", ent.sb.name, "reason", why)
}

// expire removes the successor pods unused for PoolIdle.
func (sp *successors) expire() {
	if sp != nil {
		sp.Expire()
	}
}

// close removes every successor pod, stops the fills and waits for them.
func (sp *successors) close() {
	if sp != nil {
		sp.stop()
		sp.Close()
	}
}
