package kubernetes

import (
	"context"
	"errors"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Inventory is what this package made in the executor's namespace, as the
// API server lists it: what an operator (or a test) checks after a
// replica died or the gateway shut down.
type Inventory struct {
	// Pods are the sandbox pods and the checkpoint pods (Item.Checkpoint).
	Pods []Item
	// Leases are the chat leases (abx-chat-*) and the gateway instances'
	// leases (abx-instance-*).
	Leases []Item
	// Claims are the chats' workspace claims and checkpoint claims
	// (Item.Checkpoint), kept between requests.
	Claims []Item
}

// Item is one object of an Inventory.
type Item struct {
	Name string
	// Instance is the gateway instance the object belongs to: a pod's
	// creator, a lease's holder; "" for claims, which belong to the chat.
	Instance string
	// User and Chat name the chat of a pod, claim or chat lease.
	User, Chat string
	// Deleting is set once the object's deletion has begun.
	Deleting bool
	// Checkpoint marks a checkpoint pod or claim, as opposed to a chat's
	// sandbox pod or workspace claim.
	Checkpoint bool
}

// Instance is this executor's InstanceID, as Items name it.
func (e *Executor) Instance() string { return e.o.InstanceID }

// Inventory lists the pods, leases and claims this package made in the
// namespace, whichever gateway instance made them.
func (e *Executor) Inventory(ctx context.Context) (Inventory, error) {
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy}
	var inv Inventory
	var errs []error
	pods, err := e.cs.CoreV1().Pods(e.o.Namespace).List(ctx, sel)
	if err != nil {
		errs = append(errs, e.apiError("list pods", err))
	} else {
		for _, p := range pods.Items {
			inv.Pods = append(inv.Pods, Item{Name: p.Name, Instance: p.Annotations[AnnotationInstance],
				User: p.Annotations[AnnotationUser], Chat: p.Annotations[AnnotationChat], Deleting: p.DeletionTimestamp != nil,
				Checkpoint: isCheckpoint(p.Labels)})
		}
	}
	leases, err := e.cs.CoordinationV1().Leases(e.o.Namespace).List(ctx, sel)
	if err != nil {
		errs = append(errs, e.apiError("list leases", err))
	} else {
		for _, l := range leases.Items {
			it := Item{Name: l.Name, User: l.Annotations[AnnotationUser], Chat: l.Annotations[AnnotationChat], Deleting: l.DeletionTimestamp != nil}
			if l.Spec.HolderIdentity != nil {
				it.Instance = *l.Spec.HolderIdentity
			}
			if strings.HasPrefix(l.Name, instanceLeasePrefix) {
				it.Instance = l.Annotations[AnnotationInstance]
			}
			inv.Leases = append(inv.Leases, it)
		}
	}
	claims, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).List(ctx, sel)
	if err != nil {
		errs = append(errs, e.apiError("list claims", err))
	} else {
		for _, c := range claims.Items {
			inv.Claims = append(inv.Claims, Item{Name: c.Name, User: c.Annotations[AnnotationUser], Chat: c.Annotations[AnnotationChat],
				Deleting: c.DeletionTimestamp != nil, Checkpoint: isCheckpoint(c.Labels)})
		}
	}
	return inv, errors.Join(errs...)
}
