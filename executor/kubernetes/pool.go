package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentbox/agentbox/executor"
)

// The pool (Options.Pool) keeps started pods for the first request of new
// chats. A pod's start is seconds on the request's path for a new chat,
// most of it two fixed polls in Kubernetes itself (the scheduler binds a
// new claim in steps of a second, the kubelet checks a pod's volumes every
// 300 ms), and no executor can make either shorter; a pooled pod has
// already paid them. With Options.StorageClass a pooled pod runs over a
// claim of its own, empty, which becomes the chat's workspace claim when a
// new chat adopts the pod: claims cannot be renamed, so a chat's claim is
// found by its label (workspaceClaim), never by its name.
//
// Adoption, under the chat's leases: a chat is new when it has no
// workspace claim, or only one never bound (phase Pending: no pod ever
// mounted it, so it is empty; a new chat's start checkpoint makes one).
// That unbound claim is deleted, then the pooled claim is relabelled as
// the chat's, then the pod. A gateway killed in between leaves either a
// pooled pod of a dead instance (the reconciler removes it and, while it is
// still pooled, its claim) or a chat's empty claim, which the chat's next
// request mounts. A pooled pod's labels and claim belong to this executor
// alone (its instance label, and an entry only this process holds), so no
// two replicas can adopt one pod.
//
// What a pod's spec fixes at its start is the pool's key: the Spec without
// chat, assistant and quota (executor.PoolKey) plus the claim's size. The
// helper's deadline and activeDeadlineSeconds are PoolIdle plus the
// Spec's Timeout from the pooled pod's start, so an adopted sandbox ends at
// the latest that much after its pod started; the middleware's own turn
// bound still ends its turn.
//
// The pool follows demand as executor/docker's does: closing or parking a
// sandbox refills its configuration's pool up to Options.Pool pods; a pod
// unused for PoolIdle is removed, and none is started again until a
// sandbox of its configuration closes.

// Pool defaults and labels.
const (
	// LabelPool marks a pooled pod and its claim until a chat adopts them;
	// its value is the pool's key.
	LabelPool = "agentbox.io/pool"

	poolPrefix = "abx-pool-"
)

// pool is the executor's pool of started pods; nil when Options.Pool is 0
// (its methods are then no-ops).
type pool struct {
	e *Executor
	*executor.Pool[plan, *poolEntry]
}

// poolEntry is one started pod waiting for a chat. done ends its mark in
// the executor's registry.
type poolEntry struct {
	sb      *Sandbox
	done    func()
	started time.Time
	key     string // a successor's configuration (poolKey)
}

func (e *Executor) openPool() *pool {
	if e.o.Pool == 0 {
		return nil
	}
	pl := &pool{e: e}
	pl.Pool = executor.NewPool(executor.PoolConfig[plan, *poolEntry]{
		Size: e.o.Pool, Idle: e.o.PoolIdle, Start: pl.start, Drop: pl.drop, Failed: e.fillFailed("pooled"),
	})
	return pl
}

// fillFailed logs the failed fills of a pool of what ("pooled",
// "successor") pods.
func (e *Executor) fillFailed(what string) func(error, bool) {
	return func(err error, off bool) {
		if off {
			e.logger.Error(what+" pods are off: they failed to start again and again; requests start pods of their own", "failures", executor.PoolMaxFailures, "error", err)
			return
		}
		e.logger.Warn("cannot start a "+what+" pod", "error", err)
	}
}

// poolKey is what a pooled pod for p is made for.
func poolKey(p plan) string { return executor.PoolKey(p.image, p.spec, p.spec.DiskBytes) }

// unbound reports whether claim c was never bound: no pod ever mounted it.
func unbound(c *corev1.PersistentVolumeClaim) bool {
	return c.Status.Phase == corev1.ClaimPending && c.Spec.VolumeName == ""
}

// fromPool returns a pooled pod adopted for p's chat, when the pool has
// one of p's configuration and the chat is new (its workspace claim ws is
// nil or unbound). Without one it returns nil; tried reports an adoption
// that failed (the request then starts a pod of its own, as without a
// pool, over whichever claim the chat has now).
func (e *Executor) fromPool(ctx context.Context, p plan, ws *corev1.PersistentVolumeClaim) (sb *Sandbox, tried bool) {
	if e.pool == nil || (ws != nil && !unbound(ws)) {
		return nil, false
	}
	ent := e.pool.take(p)
	if ent == nil {
		return nil, false
	}
	sb, err := e.pool.adopt(ctx, ent, p, ws)
	if err != nil {
		e.logger.Warn("a pooled pod could not take the chat; starting a pod of its own", "pod", ent.sb.name, "user", p.spec.UserID, "chat", p.spec.ChatID, "error", err)
		return nil, true
	}
	return sb, true
}

// take returns a ready pod for p's configuration, or nil.
func (pl *pool) take(p plan) *poolEntry {
	ent, _ := pl.Take(poolKey(p))
	return ent
}

// adopt makes ent's pod (and claim) p's chat's: the chat's unbound claim
// ws, if any, deleted, then the pooled claim and the pod relabelled. The
// returned sandbox is registered by the caller under its pod's name. On
// error ent is removed, but a claim already relabelled stays the chat's.
func (pl *pool) adopt(ctx context.Context, ent *poolEntry, p plan, ws *corev1.PersistentVolumeClaim) (_ *Sandbox, err error) {
	e, sb := pl.e, ent.sb
	relabelled := false
	defer func() {
		if err != nil {
			pl.dropAfter(ent, relabelled, err.Error())
		}
	}()
	claims := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace)
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	if ws != nil {
		// Only that claim as it was seen, unbound: one bound since then
		// holds a workspace.
		uid, rv := ws.UID, ws.ResourceVersion
		err := claims.Delete(cctx, ws.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, e.apiError("delete the chat's unbound claim "+ws.Name, err)
		}
	}
	if sb.plan.claim != "" {
		// The chat's claim now, no instance's.
		body := metadataPatch(map[string]any{LabelChat: p.chat, LabelPool: nil, LabelInstance: nil},
			map[string]any{AnnotationUser: p.spec.UserID, AnnotationChat: p.spec.ChatID})
		if _, err := claims.Patch(cctx, sb.plan.claim, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			return nil, e.apiError("take the pooled claim "+sb.plan.claim, err)
		}
		relabelled = true
	}
	return e.adoptPod(ctx, ent, p, "pooled")
}

// metadataPatch is a merge patch of an object's labels and annotations;
// a nil value removes one.
func metadataPatch(labels, annotations map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}})
	return b
}

// adoptPod makes ent's pod p's: labelled with p's chat and no longer
// pooled (still this instance's), p given the pod's claim and deadline,
// its helper pinged and its quota watchdog started. what names the kind
// of pod in errors and logs. The returned sandbox is registered by the
// caller under its pod's name.
func (e *Executor) adoptPod(ctx context.Context, ent *poolEntry, p plan, what string) (*Sandbox, error) {
	sb := ent.sb
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	body := metadataPatch(map[string]any{LabelChat: p.chat, LabelPool: nil},
		map[string]any{AnnotationUser: p.spec.UserID, AnnotationChat: p.spec.ChatID, AnnotationImage: p.spec.ConfigHash})
	if _, err := e.cs.CoreV1().Pods(e.o.Namespace).Patch(cctx, sb.name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return nil, e.apiError("take the "+what+" pod "+sb.name, err)
	}
	p.claim, p.deadline = sb.plan.claim, sb.plan.deadline
	sb.plan = p
	if err := sb.hc.Ping(cctx); err != nil {
		return nil, fmt.Errorf("the %s pod's helper does not answer: %w", what, err)
	}
	if err := sb.startQuota(ctx); err != nil {
		return nil, err
	}
	sb.begun = ent.done
	e.logger.Debug(what+" pod adopted", "pod", sb.name, "user", p.spec.UserID, "chat", p.spec.ChatID, "claim", p.claim, "age", time.Since(ent.started))
	return sb, nil
}

// refill starts pods for p's configuration in the background until the
// pool holds Options.Pool of them.
func (pl *pool) refill(p plan) {
	if pl != nil {
		pl.Refill(poolKey(p), p)
	}
}

// start creates a pod (and, with a StorageClass, its claim) for key, with
// no chat, and waits until its helper answers.
func (pl *pool) start(p plan, key string) (_ *poolEntry, err error) {
	e := pl.e
	id := randomID()[:12]
	name := poolPrefix + id
	done, err := e.sandboxes.Begin(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(e.bg, e.o.ReadyTimeout+2*e.o.CallTimeout)
	defer cancel()
	p.spec.UserID, p.spec.ChatID, p.spec.AssistantID, p.spec.ConfigHash = "", "", "", ""
	p.chat, p.claim = "", ""
	created := time.Now()
	sb := e.waitingSandbox(name, p)
	defer func() {
		if err != nil {
			sb.closePF()
			pl.remove(sb)
			done()
		}
	}()
	pooled := func(m *metav1.ObjectMeta) {
		m.Labels[LabelPool], m.Labels[LabelInstance] = key, e.instanceHash()
		delete(m.Labels, LabelChat)
		delete(m.Annotations, AnnotationUser)
		delete(m.Annotations, AnnotationChat)
		m.Annotations[AnnotationInstance] = e.o.InstanceID
	}
	if e.o.StorageClass != "" {
		p.claim = poolPrefix + "ws-" + id
		sb.plan.claim = p.claim
		c := e.claim(p)
		pooled(&c.ObjectMeta)
		cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
		_, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Create(cctx, c, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return nil, e.apiError("create pooled claim "+c.Name, err)
		}
	}
	pod := e.pod(sb.plan, name)
	pooled(&pod.ObjectMeta)
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return nil, e.apiError("create pooled pod "+name, err)
	}
	if err := e.waitStarted(ctx, sb); err != nil {
		return nil, fmt.Errorf("pooled pod: %w", err)
	}
	e.logger.Debug("pooled pod ready", "pod", name, "pool", key, "took", time.Since(created))
	return &poolEntry{sb: sb, done: done, started: created}, nil
}

// waitingSandbox is the Sandbox of pod name, started to wait for a
// request (a pooled or successor pod): its timeout and deadline carry
// PoolIdle, its longest wait.
func (e *Executor) waitingSandbox(name string, p plan) *Sandbox {
	p.spec.Timeout += e.o.PoolIdle
	p.deadline = time.Now().Add(p.spec.Timeout)
	return newSandbox(e, name, p)
}

// remove deletes a pooled pod and its claim, if any (which the API
// server keeps until the pod is gone).
func (pl *pool) remove(sb *Sandbox) {
	e := pl.e
	ctx := context.Background()
	if err := e.beginDelete(ctx, sb.name); err != nil {
		e.logger.Warn("cannot remove a pooled pod; the reconciler removes it when this instance is gone", "pod", sb.name, "error", err)
	}
	if sb.plan.claim == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Delete(cctx, sb.plan.claim, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		e.logger.Warn("cannot remove a pooled claim; the reconciler removes it when this instance is gone", "claim", sb.plan.claim, "error", e.apiError("delete claim", err))
	}
}

// drop removes ent's pod and claim.
func (pl *pool) drop(ent *poolEntry, why string) { pl.dropAfter(ent, false, why) }

// dropAfter removes ent's pod, and its claim unless a chat took it
// (adopted), waiting until the pod is gone when a chat took the claim,
// so that the chat's next pod is alone on it.
func (pl *pool) dropAfter(ent *poolEntry, adopted bool, why string) {
	ent.sb.stopQuota()
	ent.sb.closePF()
	if adopted {
		if err := pl.e.deletePod(context.Background(), ent.sb.name); err != nil {
			pl.e.logger.Warn("cannot remove a pooled pod", "pod", ent.sb.name, "error", err)
		}
	} else {
		pl.remove(ent.sb)
	}
	ent.done()
	pl.e.logger.Debug("pooled pod removed", "pod", ent.sb.name, "reason", why)
}

// expire removes the pooled pods unused for PoolIdle.
func (pl *pool) expire() {
	if pl != nil {
		pl.Expire()
	}
}

// close removes every pooled pod and waits for the fills under way.
func (pl *pool) close() {
	if pl != nil {
		pl.Close()
	}
}

// size reports how many pods are ready (tests).
func (pl *pool) size() int {
	if pl == nil {
		return 0
	}
	return pl.Size()
}

// poolSelector lists the pooled pods and claims, not yet any chat's.
var poolSelector = metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy + "," + LabelPool}

// sweepPool removes the pooled pods and claims of instances that are not
// live (live tells a LabelInstance hash of a live one): at New, those this
// instance left when it ran before under the same InstanceID. It returns
// how many objects it deleted.
func (e *Executor) sweepPool(ctx context.Context, live func(hash string) bool) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	n := 0
	var errs []error
	pods, err := e.cs.CoreV1().Pods(e.o.Namespace).List(cctx, poolSelector)
	if err != nil {
		return 0, e.apiError("list pooled pods", err)
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || live(pod.Labels[LabelInstance]) || e.sandboxes.Holds(pod.Name) {
			continue
		}
		if err := e.beginDelete(ctx, pod.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	m, err := e.sweepPooledClaims(ctx, live)
	return n + m, errors.Join(append(errs, err)...)
}

// sweepPooledClaims removes the pooled claims, no chat's yet, of instances
// that are not live. The reconciler runs it alone: its own pass removes a
// dead instance's pods, pooled ones among them.
func (e *Executor) sweepPooledClaims(ctx context.Context, live func(hash string) bool) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	claims, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).List(cctx, poolSelector)
	if err != nil {
		return 0, e.apiError("list pooled claims", err)
	}
	n := 0
	var errs []error
	for _, c := range claims.Items {
		if c.DeletionTimestamp != nil || live(c.Labels[LabelInstance]) || c.Labels[LabelChat] != "" {
			continue
		}
		// Only the claim as it was seen: one a chat took since is the
		// chat's.
		rv := c.ResourceVersion
		err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Delete(cctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			errs = append(errs, e.apiError("delete pooled claim "+c.Name, err))
		}
	}
	return n, errors.Join(errs...)
}
