package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// Chats are leased across gateway replicas with coordination.k8s.io Lease
// objects: "abx-chat-{chatKey}" names the chat's holder, an executor's
// InstanceID, which renews it every LeaseDuration/3 while its sandbox is
// open and deletes it on Close. A replica that dies stops renewing; once
// renewTime + LeaseDuration + ClockSkew has passed, another replica takes
// the lease over (an optimistic update: two contenders never both win) and
// removes the dead replica's pod on the chat before starting its own.
// Each executor also holds "abx-instance-{hash}", renewed the same way; the
// reconciler removes pods, chat leases and instance leases of instances
// whose lease expired.
//
// Expiry compares the holder's renewTime with this replica's clock, so
// replicas' clocks must agree within ClockSkew (NTP does).

// Lease name prefixes.
const (
	chatLeasePrefix     = "abx-chat-"
	instanceLeasePrefix = "abx-instance-"
)

// errHeld is a lease another live holder has.
type errHeld struct {
	holder string
	until  time.Time
}

func (e *errHeld) Error() string {
	return fmt.Sprintf("held by gateway instance %s until at least %s", e.holder, e.until.Format(time.RFC3339))
}

// leaseExpiry is when l stops protecting its holder: its renewal plus its
// duration plus the allowed clock skew. A lease without holder or renewal
// has expired.
func (e *Executor) leaseExpiry(l *coordinationv1.Lease) time.Time {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return time.Time{}
	}
	return s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds)*time.Second + e.o.ClockSkew)
}

// heldLease is a Lease object this executor holds and renews until release.
type heldLease struct {
	e    *Executor
	name string

	mu   sync.Mutex
	rv   string // resourceVersion of our last write
	lost error  // why renewal stopped, when another holder took it

	stop context.CancelFunc
	done chan struct{}
}

// acquireLease takes the Lease name for this executor, waiting up to wait
// while a live holder has it; it fails with ErrBusy after that. The
// annotations go on the object for operators.
func (e *Executor) acquireLease(ctx context.Context, name string, wait time.Duration, annotations map[string]string) (*heldLease, error) {
	deadline := time.Now().Add(wait)
	for {
		rv, err := e.tryLease(ctx, name, annotations)
		if err == nil {
			return e.hold(name, rv), nil
		}
		var held *errHeld
		if !errors.As(err, &held) {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("kubernetes executor: lease %s: %w; another replica is serving this chat: %w", name, err, executor.ErrBusy)
		}
		t := time.NewTimer(min(left, 200*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("kubernetes executor: waiting for lease %s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// tryLease makes one attempt: create the Lease, or take it over when it is
// free, expired or already ours (an earlier life of this instance id). It
// returns the written resourceVersion, or an *errHeld.
func (e *Executor) tryLease(ctx context.Context, name string, annotations map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	leases := e.cs.CoordinationV1().Leases(e.o.Namespace)
	now := metav1.NewMicroTime(time.Now())
	dur := int32(max(e.o.LeaseDuration/time.Second, 1))
	id := e.o.InstanceID
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.o.Namespace, Labels: map[string]string{LabelManagedBy: managedBy}, Annotations: annotations},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now},
		}
		made, err := leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return "", &errHeld{holder: "(another, just now)", until: time.Now()}
		}
		if err != nil {
			return "", e.apiError("create lease "+name, err)
		}
		return made.ResourceVersion, nil
	}
	if err != nil {
		return "", e.apiError("get lease "+name, err)
	}
	prev := ""
	if cur.Spec.HolderIdentity != nil {
		prev = *cur.Spec.HolderIdentity
	}
	if until := e.leaseExpiry(cur); prev != id && time.Now().Before(until) {
		return "", &errHeld{holder: prev, until: until}
	}
	if prev != "" && prev != id {
		e.logger.Warn("taking over a lease whose holder stopped renewing it", "lease", name, "holder", prev, "renewed", cur.Spec.RenewTime)
		transitions := int32(1)
		if cur.Spec.LeaseTransitions != nil {
			transitions = *cur.Spec.LeaseTransitions + 1
		}
		cur.Spec.LeaseTransitions = &transitions
	}
	cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds, cur.Spec.AcquireTime, cur.Spec.RenewTime = &id, &dur, &now, &now
	cur.Labels = map[string]string{LabelManagedBy: managedBy}
	cur.Annotations = annotations
	up, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return "", &errHeld{holder: "(another, just now)", until: time.Now()}
	}
	if err != nil {
		return "", e.apiError("take lease "+name, err)
	}
	if prev != "" && prev != id {
		// Its holder stopped renewing: likely a dead instance, whose other
		// pods the reconciler removes once its instance lease expired too.
		e.kickReconcile()
	}
	return up.ResourceVersion, nil
}

// hold starts renewing the lease name written at rv.
func (e *Executor) hold(name, rv string) *heldLease {
	ctx, stop := context.WithCancel(e.bg)
	h := &heldLease{e: e, name: name, rv: rv, stop: stop, done: make(chan struct{})}
	go h.renew(ctx)
	return h
}

// renew updates renewTime every LeaseDuration/3 until stopped or until
// another holder took the lease. Failed calls (an API server that does not
// answer) are retried at the next tick: the lease stays ours until it
// expires.
func (h *heldLease) renew(ctx context.Context) {
	defer close(h.done)
	every(ctx, max(h.e.o.LeaseDuration/3, 100*time.Millisecond), func() bool {
		err := h.renewOnce(ctx)
		var held *errHeld
		switch {
		case err == nil:
		case errors.As(err, &held):
			h.mu.Lock()
			h.lost = err
			h.mu.Unlock()
			h.e.logger.Warn("lost a lease to another gateway instance; its sandbox will be removed by it", "lease", h.name, "error", err)
			return false
		default:
			h.e.logger.Warn("could not renew a lease; retrying", "lease", h.name, "error", err)
		}
		return true
	})
}

// every calls fn every d until ctx ends or fn returns false.
func every(ctx context.Context, d time.Duration, fn func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !fn() {
			return
		}
	}
}

func (h *heldLease) renewOnce(ctx context.Context) error {
	e := h.e
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	leases := e.cs.CoordinationV1().Leases(e.o.Namespace)
	cur, err := leases.Get(ctx, h.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &errHeld{holder: "(deleted)", until: time.Now()}
	}
	if err != nil {
		return err
	}
	if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != e.o.InstanceID {
		holder := ""
		if cur.Spec.HolderIdentity != nil {
			holder = *cur.Spec.HolderIdentity
		}
		return &errHeld{holder: holder, until: e.leaseExpiry(cur)}
	}
	now := metav1.NewMicroTime(time.Now())
	cur.Spec.RenewTime = &now
	up, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.rv = up.ResourceVersion
	h.mu.Unlock()
	return nil
}

// Lost reports why the lease is no longer this executor's, or nil.
func (h *heldLease) Lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// release stops renewing and deletes the lease if it is still ours.
func (h *heldLease) release(ctx context.Context) {
	h.stop()
	<-h.done
	h.mu.Lock()
	rv, lost := h.rv, h.lost
	h.mu.Unlock()
	if lost != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.e.o.CallTimeout)
	defer cancel()
	leases := h.e.cs.CoordinationV1().Leases(h.e.o.Namespace)
	for range 3 {
		err := leases.Delete(ctx, h.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !apierrors.IsConflict(err) {
			h.e.logger.Warn("could not delete a lease; it expires by itself", "lease", h.name, "error", err)
			return
		}
		// A renewal the server applied after its call had timed out here
		// (a loaded API server) left rv stale: delete the lease if it is
		// still ours, at its current version.
		cur, err := leases.Get(ctx, h.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			h.e.logger.Warn("could not delete a lease; it expires by itself", "lease", h.name, "error", err)
			return
		}
		if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != h.e.o.InstanceID {
			return // taken over meanwhile: not ours to delete
		}
		rv = cur.ResourceVersion
	}
}
