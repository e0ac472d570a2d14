package kubernetes

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/checkpoint"
	"github.com/agentbox/agentbox/executor/helper"
)

// The chats' workspace checkpoints (executor.Checkpointer, with
// Options.StorageClass) live on a second claim per chat, the checkpoint
// claim, that no sandbox pod mounts. Each take, restore and fork runs in a
// checkpoint pod of its own: the image's helper (`agentbox-helper
// checkpoint run`, package executor/checkpoint's Store) over the chat's
// workspace claim and its checkpoint claim, run through the API server's
// exec subresource, under the chat's leases (so no agent process runs in
// the workspace), the pod removed before the leases go. The agent's pod
// never mounts the store, and the checkpoint pod shares no process, mount
// or network namespace with it. The list and head the last operation left
// are kept on the checkpoint claim (AnnotationCheckpoints), so that
// Checkpoints, which the middleware reads before every turn, needs no pod.

// isCheckpoint reports whether an object's labels mark it as a checkpoint
// pod or claim (LabelRole) rather than a chat's sandbox pod or workspace
// claim.
func isCheckpoint(labels map[string]string) bool { return labels[LabelRole] == RoleCheckpoint }

// Labels, annotations and names of checkpoint pods and claims.
const (
	// LabelRole tells a checkpoint claim or pod (RoleCheckpoint) from a
	// chat's workspace claim and sandbox pod (no label).
	LabelRole      = "agentbox.io/role"
	RoleCheckpoint = "checkpoint"
	// AnnotationCheckpoints on a checkpoint claim is the JSON of its
	// chat's checkpoints and head (checkpointState), as the last
	// operation left them.
	AnnotationCheckpoints = "agentbox.io/checkpoints"
	// AnnotationPending on a checkpoint claim is the JSON of the
	// checkpoints named without a pod ([]executor.CheckpointInfo: a new
	// chat's start, of its empty workspace), which the chat's next
	// checkpoint pod records in its Store before its own operation.
	AnnotationPending = "agentbox.io/checkpoints-pending"
	// ckMount is where a checkpoint pod mounts place i's claims:
	// {ckMount}/ws/i and {ckMount}/ck/i.
	ckMount = "/abx"
	// maxStateAnnotation bounds AnnotationCheckpoints; a longer list is
	// read through a pod.
	maxStateAnnotation = 128 << 10
)

var _ executor.Checkpointer = (*Executor)(nil)

// checkpointClaimName is a chat's checkpoint claim.
func checkpointClaimName(user, chat string) string { return "abx-ck-" + chatKey(user, chat) }

// checkpointState is AnnotationCheckpoints.
type checkpointState struct {
	List []executor.CheckpointInfo `json:"list"`
	Head string                    `json:"head,omitempty"`
}

// place is the plan of a chat's checkpoint work: its ids, chat key and
// the Spec defaults its claim and pod take.
func (e *Executor) place(ctx context.Context, user, chat string) (plan, error) {
	if err := e.needClaims(); err != nil {
		return plan{}, err
	}
	img, err := e.checkpointImage(ctx, user, chat)
	if err != nil {
		return plan{}, err
	}
	return e.plan(executor.Spec{UserID: user, ChatID: chat, Image: img}, time.Now())
}

// needClaims is the error of a checkpoint operation on an executor
// without workspace claims (an emptyDir workspace has nothing to keep).
func (e *Executor) needClaims() error {
	if e.o.StorageClass == "" {
		return fmt.Errorf("kubernetes executor: checkpoints need workspace claims; set Options.StorageClass: %w", executor.ErrInvalid)
	}
	return nil
}

// checkpointImage is the image of a checkpoint pod for the chat: any
// sandbox image has the helper it runs. Options.CheckpointImage or
// Options.Image when set, else the image of the last sandbox this
// executor created, else the one recorded on the chat's workspace claim
// (a replica that has created none yet).
func (e *Executor) checkpointImage(ctx context.Context, user, chat string) (string, error) {
	if img := cmp.Or(e.o.CheckpointImage, e.o.Image); img != "" {
		return img, nil
	}
	if img := e.lastImage.Load(); img != nil && *img != "" {
		return *img, nil
	}
	c, err := e.workspaceClaim(ctx, chatKey(user, chat))
	if err != nil {
		return "", err
	}
	if c != nil && c.Annotations[AnnotationSandboxImage] != "" {
		return c.Annotations[AnnotationSandboxImage], nil
	}
	return "", fmt.Errorf("kubernetes executor: no image for the checkpoint pod of %s/%s (no sandbox ran on this executor and the chat's claim names none); set Options.CheckpointImage to a sandbox image: %w", user, chat, executor.ErrInvalid)
}

// lockChat takes the chat's leases (here and across replicas), as Create
// does: no sandbox runs on the chat until the returned release.
func (e *Executor) lockChat(ctx context.Context, p plan) (func(), error) {
	local, err := e.leases.Acquire(ctx, p.chat, p.spec.LeaseWait)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: chat %s/%s: %w", p.spec.UserID, p.spec.ChatID, err)
	}
	cl, err := e.acquireLease(ctx, chatLeasePrefix+p.chat, p.spec.LeaseWait, map[string]string{AnnotationUser: p.spec.UserID, AnnotationChat: p.spec.ChatID})
	if err != nil {
		local()
		return nil, fmt.Errorf("kubernetes executor: chat %s/%s: %w", p.spec.UserID, p.spec.ChatID, err)
	}
	return func() {
		cl.release(context.WithoutCancel(ctx))
		local()
	}, nil
}

// checkpointClaim builds a chat's checkpoint claim, sized for b.
func (e *Executor) checkpointClaim(p plan, b executor.CheckpointBounds) *corev1.PersistentVolumeClaim {
	c := e.claim(p)
	c.Name = checkpointClaimName(p.spec.UserID, p.spec.ChatID)
	c.Labels[LabelRole] = RoleCheckpoint
	size := max(b.Bytes, executor.DefaultCheckpointBytes)
	// Room for the manifests and the file system's own blocks.
	c.Spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(size+size/8, resource.BinarySI)
	return c
}

// ensureClaims makes the chat's workspace and checkpoint claims unless
// they exist, sets p.claim, and returns the checkpoint claim's pending
// checkpoints.
func (e *Executor) ensureClaims(ctx context.Context, p *plan, b executor.CheckpointBounds) ([]executor.CheckpointInfo, error) {
	c, err := e.workspaceClaim(ctx, p.chat)
	if err != nil {
		return nil, err
	}
	if err := e.ensureClaim(ctx, p, c); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	claims := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace)
	c, err = claims.Get(cctx, checkpointClaimName(p.spec.UserID, p.spec.ChatID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c = e.checkpointClaim(*p, b)
		if _, err = claims.Create(cctx, c, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			c, err = claims.Get(cctx, c.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, e.apiError("get or create checkpoint claim "+checkpointClaimName(p.spec.UserID, p.spec.ChatID), err)
	}
	a, ok := c.Annotations[AnnotationPending]
	if !ok {
		return nil, nil
	}
	var pending []executor.CheckpointInfo
	if err := json.Unmarshal([]byte(a), &pending); err != nil {
		return nil, fmt.Errorf("kubernetes executor: checkpoint claim %s: annotation %s: %w; remove the annotation (the chat loses its start checkpoint)", c.Name, AnnotationPending, err)
	}
	return pending, nil
}

// TakeCheckpoint implements executor.Checkpointer. A chat without a
// workspace claim has nothing in its workspace: its checkpoint is
// recorded without a pod (takeEmpty).
func (e *Executor) TakeCheckpoint(ctx context.Context, user, chat, label string, b executor.CheckpointBounds) (executor.CheckpointInfo, error) {
	if info, ok, err := e.takeEmpty(ctx, user, chat, label, b); ok || err != nil {
		return info, err
	}
	resp, err := e.checkpointOp(ctx, helper.CheckpointRequest{Op: "take", Label: label, Bounds: b}, b, user, chat)
	return resp.Info, err
}

// takeEmpty checkpoints a new chat, one with neither a workspace claim
// nor a checkpoint claim (so an empty workspace), without a pod: a new
// chat's start is on its first request's path, and a pod there costs
// seconds. It names the checkpoint, creates the checkpoint claim with it
// as the chat's list and head and as pending (AnnotationPending: the
// chat's next checkpoint pod records it in the Store, as an empty
// workspace's, before its own operation), then the workspace claim. ok is
// false, and nothing is done, for a chat that has either claim. (A new
// volume's root lost+found, mkfs's, is never in a checkpoint: the Store
// leaves it alone.)
func (e *Executor) takeEmpty(ctx context.Context, user, chat, label string, b executor.CheckpointBounds) (info executor.CheckpointInfo, ok bool, err error) {
	p, err := e.place(ctx, user, chat)
	if err != nil {
		return info, false, err
	}
	release, err := e.lockChat(ctx, p)
	if err != nil {
		return info, false, err
	}
	defer release()
	if ws, err := e.workspaceClaim(ctx, p.chat); ws != nil || err != nil {
		return info, false, err
	}
	claims := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace)
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	now := time.Now()
	info = executor.CheckpointInfo{ID: checkpoint.NewID(now), Label: label, Created: now}
	st, _ := json.Marshal(checkpointState{List: []executor.CheckpointInfo{info}, Head: info.ID})
	pending, _ := json.Marshal([]executor.CheckpointInfo{info})
	c := e.checkpointClaim(p, b)
	c.Annotations[AnnotationCheckpoints], c.Annotations[AnnotationPending] = string(st), string(pending)
	if _, err := claims.Create(cctx, c, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		return executor.CheckpointInfo{}, false, nil
	} else if err != nil {
		return executor.CheckpointInfo{}, false, e.apiError("create checkpoint claim "+c.Name, err)
	}
	if err := e.ensureClaim(ctx, &p, nil); err != nil {
		return executor.CheckpointInfo{}, false, err
	}
	return info, true, nil
}

// RestoreCheckpoint implements executor.Checkpointer.
func (e *Executor) RestoreCheckpoint(ctx context.Context, user, chat, id string) (executor.RestoreInfo, error) {
	if err := e.known(ctx, user, chat, id); err != nil {
		return executor.RestoreInfo{}, err
	}
	resp, err := e.checkpointOp(ctx, helper.CheckpointRequest{Op: "restore", ID: id}, executor.CheckpointBounds{}, user, chat)
	return resp.Restore, err
}

// ForkCheckpoint implements executor.Checkpointer: one checkpoint pod
// mounts both chats' claims.
func (e *Executor) ForkCheckpoint(ctx context.Context, user, chat, id, toUser, toChat string, b executor.CheckpointBounds) (executor.CheckpointInfo, error) {
	if user == toUser && chat == toChat {
		return executor.CheckpointInfo{}, fmt.Errorf("kubernetes executor: fork %s/%s into itself; name another chat: %w", user, chat, executor.ErrInvalid)
	}
	if err := e.known(ctx, user, chat, id); err != nil {
		return executor.CheckpointInfo{}, err
	}
	resp, err := e.checkpointOp(ctx, helper.CheckpointRequest{Op: "fork", ID: id, Bounds: b}, b, user, chat, toUser, toChat)
	return resp.Info, err
}

// known is ErrNotFound, without a pod or a claim made, for a checkpoint
// the chat's list on its checkpoint claim does not hold (or a chat without
// one: a user inventing ids makes nothing in the cluster); nil when it
// holds it or is too long to read there (the Store decides).
func (e *Executor) known(ctx context.Context, user, chat, id string) error {
	list, _, ok, err := e.recorded(ctx, user, chat)
	if err != nil || !ok {
		return err
	}
	if !slices.ContainsFunc(list, func(c executor.CheckpointInfo) bool { return c.ID == id }) {
		return fmt.Errorf("kubernetes executor: chat %s/%s has no checkpoint %q: %w", user, chat, id, executor.ErrNotFound)
	}
	return nil
}

// recorded reads the chat's checkpoints and head from its checkpoint
// claim: ok false when the list is not there (too long for the
// annotation); none, ok true, for a chat without the claim.
func (e *Executor) recorded(ctx context.Context, user, chat string) (list []executor.CheckpointInfo, head string, ok bool, err error) {
	if err := e.needClaims(); err != nil {
		return nil, "", false, err
	}
	if err := errors.Join(executor.ValidateID("user id", user), executor.ValidateID("chat id", chat)); err != nil {
		return nil, "", false, fmt.Errorf("kubernetes executor: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Get(cctx, checkpointClaimName(user, chat), metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		return nil, "", true, nil
	}
	if err != nil {
		return nil, "", false, e.apiError("get checkpoint claim", err)
	}
	var st checkpointState
	if a, found := c.Annotations[AnnotationCheckpoints]; found && json.Unmarshal([]byte(a), &st) == nil {
		return st.List, st.Head, true, nil
	}
	return nil, "", false, nil
}

// Checkpoints implements executor.Checkpointer: the list the last
// operation left on the checkpoint claim, or, when it is not there (a
// list too long for an annotation), the Store's own through a pod. A chat
// without a checkpoint claim has none.
func (e *Executor) Checkpoints(ctx context.Context, user, chat string) ([]executor.CheckpointInfo, string, error) {
	list, head, ok, err := e.recorded(ctx, user, chat)
	if ok || err != nil {
		return list, head, err
	}
	resp, err := e.checkpointOp(ctx, helper.CheckpointRequest{Op: "list"}, executor.CheckpointBounds{}, user, chat)
	return resp.List, resp.Head, err
}

// checkpointOp runs req over the places (user, chat pairs: the first is
// the Store's, a second the fork's) in a checkpoint pod, under their
// leases, and records the resulting list on the last place's checkpoint
// claim.
func (e *Executor) checkpointOp(ctx context.Context, req helper.CheckpointRequest, b executor.CheckpointBounds, ids ...string) (helper.CheckpointResponse, error) {
	var places []plan
	for i := 0; i+1 < len(ids); i += 2 {
		p, err := e.place(ctx, ids[i], ids[i+1])
		if err != nil {
			return helper.CheckpointResponse{}, err
		}
		places = append(places, p)
	}
	// Locked in one order, so that two forks between the same chats in
	// opposite directions cannot wait on each other.
	order := make([]int, len(places))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(places[a].chat, places[b].chat) })
	for _, i := range order {
		p := &places[i]
		release, err := e.lockChat(ctx, *p)
		if err != nil {
			return helper.CheckpointResponse{}, err
		}
		defer release()
		pending, err := e.ensureClaims(ctx, p, b)
		if err != nil {
			return helper.CheckpointResponse{}, err
		}
		if p.chat == places[0].chat {
			req.Pending = pending
		}
	}
	req.UID, req.GID = int(e.o.UID), int(e.o.GID)
	req.Store, req.Workspace = ckMount+"/ck/0", ckMount+"/ws/0"
	if len(places) > 1 {
		req.ToStore, req.ToWorkspace = ckMount+"/ck/1", ckMount+"/ws/1"
	}
	resp, err := e.runCheckpointPod(ctx, places, req)
	if err != nil {
		return resp, err
	}
	if err := resp.Err(); err != nil {
		return resp, fmt.Errorf("kubernetes executor: checkpoint %s of %s/%s: %w", req.Op, ids[0], ids[1], err)
	}
	last := places[len(places)-1]
	if len(places) > 1 && len(req.Pending) > 0 {
		// The fork's source recorded its pending checkpoints; its list
		// on the claim has them already.
		e.patchAnnotations(ctx, places[0], map[string]*string{AnnotationPending: nil})
	}
	e.recordCheckpoints(ctx, last, checkpointState{List: resp.List, Head: resp.Head})
	return resp, nil
}

// recordCheckpoints keeps st on the chat's checkpoint claim, with no
// pending checkpoints (the Store has recorded them); when it cannot keep
// st, it removes what is there, so that Checkpoints reads the Store.
func (e *Executor) recordCheckpoints(ctx context.Context, p plan, st checkpointState) {
	var val *string
	if b, err := json.Marshal(st); err == nil && len(b) <= maxStateAnnotation {
		v := string(b)
		val = &v
	}
	e.patchAnnotations(ctx, p, map[string]*string{AnnotationCheckpoints: val, AnnotationPending: nil})
}

// patchAnnotations sets (nil: removes) annotations of the chat's
// checkpoint claim; a failure is logged, since the Store is the truth and
// a list read from it is right.
func (e *Executor) patchAnnotations(ctx context.Context, p plan, annotations map[string]*string) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.CallTimeout)
	defer cancel()
	name := checkpointClaimName(p.spec.UserID, p.spec.ChatID)
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Patch(cctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.logger.Warn("could not record the chat's checkpoints on its claim; listing them will read the store", "claim", name, "error", e.apiError("patch claim", err))
	}
}

// maxCheckpointResponse bounds what a checkpoint pod's helper writes back.
const maxCheckpointResponse = 8 << 20

// runCheckpointPod starts a checkpoint pod over the places' claims, runs
// the helper's `checkpoint run` in it with req, and removes it (waiting
// until it is gone, so that the chat's next pod never meets it).
func (e *Executor) runCheckpointPod(ctx context.Context, places []plan, req helper.CheckpointRequest) (helper.CheckpointResponse, error) {
	var resp helper.CheckpointResponse
	pod, err := e.checkpointPod(ctx, places)
	if err != nil {
		return resp, err
	}
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return resp, e.apiError("create checkpoint pod "+pod.Name, err)
	}
	defer func() {
		if err := e.deletePod(context.WithoutCancel(ctx), pod.Name); err != nil {
			e.logger.Warn("could not remove a checkpoint pod; the chat's next sandbox removes it", "pod", pod.Name, "error", err)
		}
	}()
	if err := e.waitRunning(ctx, pod.Name); err != nil {
		return resp, e.unscheduled(ctx, pod.Name, err)
	}
	in, err := json.Marshal(req)
	if err != nil {
		return resp, fmt.Errorf("kubernetes executor: checkpoint request: %w", err)
	}
	var out, errb bytes.Buffer
	stdout := &capWriter{w: &out, left: maxCheckpointResponse, over: func() {}}
	stderr := &capWriter{w: &errb, left: 64 << 10, over: func() {}}
	if err := e.stream(ctx, pod.Name, []string{e.o.HelperPath, "checkpoint", "run"}, bytes.NewReader(in), stdout, stderr); err != nil {
		return resp, fmt.Errorf("kubernetes executor: checkpoint %s in pod %s: %w (stderr: %q); is the image's helper this version?", req.Op, pod.Name, err, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		return resp, fmt.Errorf("kubernetes executor: checkpoint %s in pod %s: bad response: %w (stderr: %q)", req.Op, pod.Name, err, errb.String())
	}
	return resp, nil
}

// checkpointPod builds the pod of one checkpoint operation: the sandbox's
// image and security context (read-only root, no service account token,
// no privilege escalation) but root with the four file capabilities a
// Store needs, the helper idle as main process, place i's
// workspace and checkpoint claims at {ckMount}/ws/i and {ckMount}/ck/i.
// It waits until a closed sandbox pod of the first chat is gone (no agent
// process runs during the operation); a pod still on it (a parked session
// pod) fixes the node, as a ReadWriteOnce claim needs.
func (e *Executor) checkpointPod(ctx context.Context, places []plan) (*corev1.Pod, error) {
	p := places[0]
	pod := e.pod(p, "abx-ck-"+p.chat[:12]+"-"+randomID()[:8])
	pod.Labels[LabelRole] = RoleCheckpoint
	pod.Spec.ShareProcessNamespace = nil
	var deadline int64 = 600
	pod.Spec.ActiveDeadlineSeconds = &deadline
	c := &pod.Spec.Containers[0]
	// Root with only the file capabilities a take and a restore need, as
	// the gateway has on the other backends: the agent can leave files
	// and directories of mode 000 (its own, which it can chmod, but the
	// Store reads them as they are) and a restore chowns what it makes to
	// the sandbox user. Nothing of the agent's reaches this pod.
	var root int64
	no := false
	pod.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.RunAsGroup, pod.Spec.SecurityContext.RunAsNonRoot = &root, &root, &no
	// No fsGroup: the kubelet would walk both claims to chgrp them at
	// every mount, and the Store sets the owners of what it makes.
	pod.Spec.SecurityContext.FSGroup = nil
	c.SecurityContext.RunAsNonRoot = &no
	c.SecurityContext.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER"}}
	c.Command = []string{e.o.HelperPath, "checkpoint", "wait"}
	c.Env = nil
	c.WorkingDir = "/"
	pod.Spec.Volumes, c.VolumeMounts = nil, nil
	for i, pl := range places {
		n := strconv.Itoa(i)
		pod.Spec.Volumes = append(pod.Spec.Volumes,
			corev1.Volume{Name: "ws-" + n, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pl.claim}}},
			corev1.Volume{Name: "ck-" + n, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: checkpointClaimName(pl.spec.UserID, pl.spec.ChatID)}}})
		c.VolumeMounts = append(c.VolumeMounts,
			corev1.VolumeMount{Name: "ws-" + n, MountPath: ckMount + "/ws/" + n},
			corev1.VolumeMount{Name: "ck-" + n, MountPath: ckMount + "/ck/" + n})
	}
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	list, err := e.cs.CoreV1().Pods(e.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + p.chat})
	if err != nil {
		return nil, e.apiError("list pods of the chat", err)
	}
	for _, other := range list.Items {
		if other.DeletionTimestamp != nil {
			// The chat's last sandbox, closed: its agent processes may
			// still run until the pod is gone.
			if err := e.deletePod(ctx, other.Name); err != nil {
				return nil, err
			}
			continue
		}
		if other.Spec.NodeName != "" && pod.Spec.Affinity == nil {
			// Through the scheduler (not nodeName), which binds a claim
			// that waits for its first consumer.
			pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{other.Spec.NodeName},
				}}}},
			}}}
		}
	}
	return pod, nil
}
