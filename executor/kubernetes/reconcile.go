package kubernetes

import (
	"context"
	"errors"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// instanceLeaseName is the Lease that says the executor whose pods carry
// LabelInstance=hash is alive.
func instanceLeaseName(hash string) string { return instanceLeasePrefix + hash }

// start takes this executor's instance lease and starts the reconciler.
// An executor restarted under the same InstanceID takes its own lease over
// at once (replicas must have distinct ids: "" picks a random one).
func (e *Executor) start(ctx context.Context) error {
	h, err := e.acquireLease(ctx, instanceLeaseName(e.instanceHash()), 0, map[string]string{AnnotationInstance: e.o.InstanceID})
	if err != nil {
		return err
	}
	e.instance = h
	own := e.instanceHash()
	if n, err := e.sweepPool(ctx, func(hash string) bool { return hash != own }); err != nil {
		e.logger.Warn("cannot remove the pooled pods this instance left when it ran before", "error", err)
	} else if n > 0 {
		e.logger.Info("removed the pooled pods and claims this instance left when it ran before", "objects", n)
	}
	if e.pool != nil || e.succ != nil {
		e.wg.Go(func() {
			every(e.bg, min(e.o.PoolIdle/2, time.Minute), func() bool {
				e.pool.expire()
				e.succ.expire()
				return true
			})
		})
	}
	if e.o.ReconcileInterval > 0 {
		e.wg.Go(func() { e.reconcileLoop(e.bg) })
	}
	if e.o.StorageClass != "" && e.o.Retention > 0 && e.o.RetentionInterval > 0 {
		e.wg.Go(func() { e.retentionLoop(e.bg) })
	}
	return nil
}

func (e *Executor) instanceHash() string { return chatKey("instance", e.o.InstanceID) }

// reconcileLoop runs Reconcile at start, every ReconcileInterval, and
// when a lease was taken over (kickReconcile): then at once and once more
// a third of LeaseDuration later, because the dead holder's instance
// lease, renewed on a tick of its own, may expire up to that much after
// the chat's.
func (e *Executor) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(e.o.ReconcileInterval)
	defer t.Stop()
	var again <-chan time.Time
	for {
		if n, err := e.Reconcile(ctx); err != nil && ctx.Err() == nil {
			e.logger.Warn("reconcile failed; retrying at the next interval", "error", err)
		} else if n > 0 {
			e.logger.Info("removed what dead gateway instances left", "objects", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.kick:
			again = time.After(e.o.LeaseDuration/3 + 100*time.Millisecond)
		case <-again:
			again = nil
		}
	}
}

// kickReconcile asks the reconciler for a pass now (a no-op when one is
// already asked for or the reconciler is off).
func (e *Executor) kickReconcile() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Reconcile removes what gateway instances whose instance lease expired
// (or is gone) left in the namespace: their sandbox pods, the chat leases
// they held and their instance leases. It returns how many objects it
// deleted. Pods are deleted without waiting for them to be gone.
func (e *Executor) Reconcile(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy}
	leases, err := e.cs.CoordinationV1().Leases(e.o.Namespace).List(cctx, sel)
	if err != nil {
		return 0, e.apiError("list leases", err)
	}
	pods, err := e.cs.CoreV1().Pods(e.o.Namespace).List(cctx, sel)
	if err != nil {
		return 0, e.apiError("list pods", err)
	}
	now := time.Now()
	live := map[string]bool{e.instanceHash(): true}
	var stale []*coordinationv1.Lease
	for i := range leases.Items {
		l := &leases.Items[i]
		expired := now.After(e.leaseExpiry(l))
		if hash, ok := strings.CutPrefix(l.Name, instanceLeasePrefix); ok && !expired {
			live[hash] = true
		}
		if expired {
			stale = append(stale, l)
		}
	}
	grace := int64(max(e.o.StopGrace/time.Second, 1))
	n := 0
	var errs []error
	for _, pod := range pods.Items {
		inst := pod.Labels[LabelInstance]
		if inst == "" || live[inst] || pod.DeletionTimestamp != nil {
			continue
		}
		err := e.cs.CoreV1().Pods(e.o.Namespace).Delete(cctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, e.apiError("delete pod "+pod.Name, err))
			continue
		}
		e.logger.Warn("removed the pod of a dead gateway instance", "pod", pod.Name, "instance", pod.Annotations[AnnotationInstance], "user", pod.Annotations[AnnotationUser], "chat", pod.Annotations[AnnotationChat])
		n++
	}
	// A dead instance's pooled claims (its pooled pods went above).
	pooled, err := e.sweepPooledClaims(ctx, func(hash string) bool { return live[hash] })
	n += pooled
	errs = append(errs, err)
	for _, l := range stale {
		// Only the version seen expired: a lease renewed or taken over
		// since then stays.
		rv := l.ResourceVersion
		err := e.cs.CoordinationV1().Leases(e.o.Namespace).Delete(cctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			errs = append(errs, e.apiError("delete lease "+l.Name, err))
		}
	}
	return n, errors.Join(errs...)
}
