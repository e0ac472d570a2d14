package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentbox/agentbox/executor"
)

// AnnotationLastUsed on a workspace claim is when a sandbox on it last
// closed (RFC 3339); the retention sweep reads it, or the claim's creation
// time when it is missing.
const AnnotationLastUsed = "agentbox.io/last-used"

// touchClaim records on the chat's claim that a sandbox on it closed now.
// A failure only delays the claim's retention, so it is logged.
func (e *Executor) touchClaim(ctx context.Context, p plan) {
	if p.claim == "" {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		AnnotationLastUsed: time.Now().UTC().Format(time.RFC3339),
	}}})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.CallTimeout)
	defer cancel()
	name := p.claim
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.logger.Warn("could not record the workspace's last use; its retention starts from an earlier time", "claim", name, "error", e.apiError("patch claim", err))
	}
}

// SweepClaims deletes the workspace claims of chats nobody used for
// Options.Retention: the chat's lease is taken first (a chat in use on any
// replica is skipped), no pod may be on the chat, and a claim used since
// it was listed is kept. It returns how many claims it deleted. The
// executor runs it every Options.RetentionInterval.
func (e *Executor) SweepClaims(ctx context.Context) (int, error) {
	if e.o.StorageClass == "" || e.o.Retention < 0 {
		return 0, nil
	}
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	claims, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy})
	cancel()
	if err != nil {
		return 0, e.apiError("list workspace claims", err)
	}
	n := 0
	var errs []error
	for i := range claims.Items {
		c := &claims.Items[i]
		last := c.CreationTimestamp.Time
		if t, err := time.Parse(time.RFC3339, c.Annotations[AnnotationLastUsed]); err == nil {
			last = t
		}
		chat := c.Labels[LabelChat]
		// A checkpoint claim goes with its workspace claim.
		if c.DeletionTimestamp != nil || chat == "" || isCheckpoint(c.Labels) || time.Since(last) < e.o.Retention {
			continue
		}
		removed, err := e.removeClaim(ctx, c.Name, c.ResourceVersion, chat, c.Annotations)
		if err != nil {
			errs = append(errs, err)
		} else if removed {
			e.logger.Info("removed a workspace nobody used for the retention period", "claim", c.Name, "user", c.Annotations[AnnotationUser],
				"chat", c.Annotations[AnnotationChat], "last_used", last, "retention", e.o.Retention)
			n++
		}
	}
	return n, errors.Join(errs...)
}

// removeClaim deletes claim name, seen at resourceVersion rv, under its
// chat's leases (this process's and the Lease object), unless a pod is on
// the chat or the claim changed since. It reports whether it deleted it.
func (e *Executor) removeClaim(ctx context.Context, name, rv, chat string, ann map[string]string) (bool, error) {
	local, err := e.leases.Acquire(ctx, chat, 0)
	if err != nil {
		return false, nil // in use here
	}
	defer local()
	held, err := e.acquireLease(ctx, chatLeasePrefix+chat, 0, map[string]string{AnnotationUser: ann[AnnotationUser], AnnotationChat: ann[AnnotationChat]})
	if errors.Is(err, executor.ErrBusy) {
		return false, nil // in use on another replica
	}
	if err != nil {
		return false, err
	}
	defer held.release(ctx)
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	pods, err := e.cs.CoreV1().Pods(e.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chat})
	if err != nil {
		return false, e.apiError("list pods of the chat", err)
	}
	if len(pods.Items) > 0 {
		return false, nil
	}
	err = e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Delete(cctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil:
		// The workspace's checkpoints go with it.
		ck := checkpointClaimName(ann[AnnotationUser], ann[AnnotationChat])
		if err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Delete(cctx, ck, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return true, e.apiError("delete checkpoint claim "+ck, err)
		}
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil // gone, or used since it was listed
	}
	return false, e.apiError(fmt.Sprintf("delete workspace claim %s", name), err)
}

// retentionLoop runs SweepClaims every RetentionInterval.
func (e *Executor) retentionLoop(ctx context.Context) {
	every(ctx, e.o.RetentionInterval, func() bool {
		if _, err := e.SweepClaims(ctx); err != nil && ctx.Err() == nil {
			e.logger.Warn("workspace retention sweep failed; retrying at the next interval", "error", err)
		}
		return true
	})
}
