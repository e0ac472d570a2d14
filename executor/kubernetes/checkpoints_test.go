package kubernetes

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// TestCheckpointsCapability: checkpoints need workspace claims.
func TestCheckpointsCapability(t *testing.T) {
	assert.True(t, unitExecutor(t, Options{Image: "img:1", StorageClass: "local"}).Capabilities().Checkpoints)
	assert.False(t, unitExecutor(t, Options{Image: "img:1"}).Capabilities().Checkpoints, "an emptyDir workspace has nothing to keep")
	_, _, err := unitExecutor(t, Options{Image: "img:1"}).Checkpoints(t.Context(), "u1", "c1")
	assert.ErrorIs(t, err, executor.ErrInvalid)
}

// TestCheckpointImage: without Options.Image, a checkpoint pod runs the
// image of the last sandbox the executor planned, or, on a replica that
// planned none, the image recorded on the chat's workspace claim; with
// neither, the error says what to set. Listing needs no image.
func TestCheckpointImage(t *testing.T) {
	e, cs := newFake(t, Options{StorageClass: "local"})
	e.o.Image = ""
	ctx := t.Context()
	_, err := e.place(ctx, "u1", "c1")
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "set Options.CheckpointImage")
	_, _, err = e.Checkpoints(ctx, "u1", "c1")
	require.NoError(t, err, "a chat without checkpoints lists none, image or not")

	p, err := e.plan(executor.Spec{UserID: "u1", ChatID: "c1", Image: "sandbox:1"}, time.Now())
	require.NoError(t, err)
	require.NoError(t, e.ensureClaim(ctx, &p, nil), "a sandbox's Create makes the claim")
	e.lastImage.Store(&p.image)
	q, err := e.place(ctx, "u2", "c2")
	require.NoError(t, err)
	assert.Equal(t, "sandbox:1", q.image, "the last sandbox's image")

	other := newExecutor(e.o, nil, cs.cs) // another replica: no sandbox yet
	q, err = other.place(ctx, "u1", "c1")
	require.NoError(t, err)
	assert.Equal(t, "sandbox:1", q.image, "the image on the chat's claim")
	_, err = other.place(ctx, "u2", "c2")
	require.ErrorIs(t, err, executor.ErrInvalid, "a chat whose claim names none")

	o := e.o
	o.CheckpointImage = "sandbox:2" // a stack sets its first assistant's
	q, err = newExecutor(o, nil, cs.cs).place(ctx, "u2", "c2")
	require.NoError(t, err)
	assert.Equal(t, "sandbox:2", q.image, "Options.CheckpointImage first")
}

// claimsOf lists the claims a pod mounts.
func claimsOf(pod *corev1.Pod) []string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return names
}

// TestCheckpointPodSpec: the agent's pod mounts the workspace claim only;
// the checkpoint pod mounts the workspace and checkpoint claims of its
// places, with the sandbox's security context, the helper idle as its
// main process, and no process namespace to share.
func TestCheckpointPodSpec(t *testing.T) {
	e, _ := newFake(t, Options{StorageClass: "local"})
	p, err := e.place(context.Background(), "u1", "c1")
	require.NoError(t, err)
	_, err = e.ensureClaims(t.Context(), &p, executor.CheckpointBounds{})
	require.NoError(t, err)
	agent := e.pod(p, "abx-x")
	assert.Equal(t, []string{claimName("u1", "c1")}, claimsOf(agent), "the agent's pod never mounts the store")

	q, err := e.place(context.Background(), "u2", "c2")
	require.NoError(t, err)
	_, err = e.ensureClaims(t.Context(), &q, executor.CheckpointBounds{})
	require.NoError(t, err)
	pod, err := e.checkpointPod(t.Context(), []plan{p, q})
	require.NoError(t, err)
	assert.Equal(t, []string{claimName("u1", "c1"), checkpointClaimName("u1", "c1"), claimName("u2", "c2"), checkpointClaimName("u2", "c2")}, claimsOf(pod))
	assert.Equal(t, RoleCheckpoint, pod.Labels[LabelRole])
	assert.Equal(t, p.chat, pod.Labels[LabelChat], "the chat's next sandbox removes a checkpoint pod left on it")
	assert.Nil(t, pod.Spec.ShareProcessNamespace)
	assert.Nil(t, pod.Spec.SecurityContext.FSGroup, "no walk of the claims at every mount")
	assert.False(t, *pod.Spec.AutomountServiceAccountToken)
	c := pod.Spec.Containers[0]
	assert.Equal(t, []string{e.o.HelperPath, "checkpoint", "wait"}, c.Command)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.Equal(t, []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER"}, c.SecurityContext.Capabilities.Add)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, int64(0), *pod.Spec.SecurityContext.RunAsUser, "reads what the agent made mode 000")
	assert.True(t, *agent.Spec.SecurityContext.RunAsNonRoot, "the agent's pod is untouched")
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
	}
	assert.Equal(t, []string{"/abx/ws/0", "/abx/ck/0", "/abx/ws/1", "/abx/ck/1"}, mounts)
}

// TestCheckpointsFromClaim: the list is read from the checkpoint claim
// without a pod; a chat without one has none.
func TestCheckpointsFromClaim(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local"})
	list, head, err := e.Checkpoints(t.Context(), "u1", "c1")
	require.NoError(t, err)
	assert.Empty(t, list)
	assert.Empty(t, head)

	p, err := e.place(context.Background(), "u1", "c1")
	require.NoError(t, err)
	c := e.checkpointClaim(p, executor.CheckpointBounds{})
	want := checkpointState{List: []executor.CheckpointInfo{{ID: "ck_1", Label: "start"}, {ID: "ck_2", Label: "turn 1", Files: 3}}, Head: "ck_1"}
	b, err := json.Marshal(want)
	require.NoError(t, err)
	c.Annotations[AnnotationCheckpoints] = string(b)
	_, err = f.cs.CoreV1().PersistentVolumeClaims("ns").Create(t.Context(), c, metav1.CreateOptions{})
	require.NoError(t, err)
	list, head, err = e.Checkpoints(t.Context(), "u1", "c1")
	require.NoError(t, err)
	assert.Equal(t, want.List, list)
	assert.Equal(t, "ck_1", head)
	assert.Equal(t, 0, int(f.created.Load()), "no pod to read the list")
}

// TestCheckpointClaimSweptWithWorkspace: the sweep never removes a
// checkpoint claim on its own (it is not touched as the workspace is), and
// removes it with its workspace claim.
func TestCheckpointClaimSweptWithWorkspace(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Retention: 1, RetentionInterval: -1})
	p, err := e.place(context.Background(), "u1", "c1")
	require.NoError(t, err)
	_, err = e.ensureClaims(t.Context(), &p, executor.CheckpointBounds{})
	require.NoError(t, err)
	inv, err := e.Inventory(t.Context())
	require.NoError(t, err)
	require.Len(t, inv.Claims, 2)
	kinds := map[string]bool{}
	for _, c := range inv.Claims {
		kinds[c.Name] = c.Checkpoint
	}
	assert.Equal(t, map[string]bool{claimName("u1", "c1"): false, checkpointClaimName("u1", "c1"): true}, kinds,
		"the inventory tells the checkpoint claim from the workspace's")
	n, err := e.SweepClaims(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the workspace claim, counted once")
	claims, err := f.cs.CoreV1().PersistentVolumeClaims("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, claims.Items, "the checkpoint claim went with the workspace's")
}

// TestNewChatStartNeedsNoPod: a new chat's start checkpoint (no claim yet,
// so an empty workspace) is recorded on its new checkpoint claim as its
// list, head and pending checkpoint, without a pod; the next operation
// reads it as pending (to have its pod's Store record it). A chat that has
// a workspace claim is not taken so.
func TestNewChatStartNeedsNoPod(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local"})
	ctx := t.Context()
	b := executor.CheckpointBounds{Count: 5, Bytes: 1 << 30}
	info, err := e.TakeCheckpoint(ctx, "u1", "c1", "start", b)
	require.NoError(t, err)
	assert.Equal(t, 0, int(f.created.Load()), "no pod")
	assert.Equal(t, "start", info.Label)
	assert.Zero(t, info.Files)
	list, head, err := e.Checkpoints(ctx, "u1", "c1")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, info.ID, list[0].ID)
	assert.True(t, info.Created.Equal(list[0].Created))
	assert.Equal(t, info.ID, head)
	claims := f.cs.CoreV1().PersistentVolumeClaims("ns")
	_, err = claims.Get(ctx, claimName("u1", "c1"), metav1.GetOptions{})
	require.NoError(t, err, "the workspace claim is made")

	p, err := e.place(ctx, "u1", "c1")
	require.NoError(t, err)
	pending, err := e.ensureClaims(ctx, &p, b)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	assert.Equal(t, info.ID, pending[0].ID)

	_, ok, err := e.takeEmpty(ctx, "u1", "c1", "again", b)
	require.NoError(t, err)
	assert.False(t, ok, "a chat with a claim is taken through a pod")

	// Only the gateway writes the annotation; a broken one is an error
	// that says what to do, not a silently lost start.
	c, err := claims.Get(ctx, checkpointClaimName("u1", "c1"), metav1.GetOptions{})
	require.NoError(t, err)
	c.Annotations[AnnotationPending] = "{"
	_, err = claims.Update(ctx, c, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = e.ensureClaims(ctx, &p, b)
	require.ErrorContains(t, err, "remove the annotation")
}

// TestUnknownCheckpointsMakeNothing: restoring or forking a checkpoint
// the chat's list does not hold, or from a chat that has none (a user
// inventing ids), is ErrNotFound without a pod or a claim.
func TestUnknownCheckpointsMakeNothing(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local"})
	ctx := t.Context()
	start, err := e.TakeCheckpoint(ctx, "u1", "c1", "start", executor.CheckpointBounds{})
	require.NoError(t, err)
	claims := f.cs.CoreV1().PersistentVolumeClaims("ns")
	before, err := claims.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for name, tc := range map[string]struct{ chat, id string }{
		"invented chat":         {"invented", start.ID},
		"id of another chat":    {"c1", "ck_0000000000001deadbeef"},
		"id that is not one":    {"c1", "../x"},
		"invented chat, bad id": {"invented-2", "x"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.RestoreCheckpoint(ctx, "u1", tc.chat, tc.id)
			require.ErrorIs(t, err, executor.ErrNotFound)
			_, err = e.ForkCheckpoint(ctx, "u1", tc.chat, tc.id, "u1", "fork-of-"+tc.chat, executor.CheckpointBounds{})
			require.ErrorIs(t, err, executor.ErrNotFound)
		})
	}
	after, err := claims.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, after.Items, len(before.Items), "no claim made")
	assert.Equal(t, 0, int(f.created.Load()), "no pod")
}
