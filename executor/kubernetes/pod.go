package kubernetes

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// Labels and annotations on every pod and claim this package makes.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "agentbox"
	// LabelChat is a hash of user and chat id (label values cannot hold
	// every id); AnnotationUser/AnnotationChat hold the ids themselves.
	LabelChat       = "agentbox.io/chat"
	LabelInstance   = "agentbox.io/instance"
	AnnotationUser  = "agentbox.io/user"
	AnnotationChat  = "agentbox.io/chat"
	AnnotationImage = "agentbox.io/config-hash"
	// AnnotationSandboxImage, on a workspace claim, is the image of the
	// sandbox that made it: the image of its checkpoint pods when
	// Options.Image is unset.
	AnnotationSandboxImage = "agentbox.io/sandbox-image"
	// AnnotationInstance holds the InstanceID whose hash LabelInstance is.
	AnnotationInstance = "agentbox.io/instance"
)

// Volume names and mount points of the sandbox container.
const (
	volWorkspace = "workspace"
	volTmp       = "tmp"
	volHome      = "home"
	volRun       = "run"
)

// chatKey is the label value naming a user's chat.
func chatKey(user, chat string) string {
	h := sha256.Sum256([]byte(user + "\x00" + chat))
	return hex.EncodeToString(h[:12])
}

// claimName is the name of the workspace claim this package makes for a
// chat; a chat that adopted a pooled pod has that pod's claim instead
// (workspaceClaim finds either by its label).
func claimName(user, chat string) string { return "abx-ws-" + chatKey(user, chat) }

// plan is a validated Spec with the Options' defaults applied.
type plan struct {
	spec     executor.Spec
	image    string
	deadline time.Time
	chat     string // chatKey
	// claim is the chat's workspace claim (with Options.StorageClass), set
	// once it is found or made: claimName for a claim this package made
	// for the chat, a pooled pod's own for one it adopted.
	claim string
}

// plan is executor.Normalize with the Options' defaults (image, user,
// lease wait) and the executor's capabilities.
func (e *Executor) plan(spec executor.Spec, now time.Time) (plan, error) {
	own := fmt.Sprintf("%d:%d", e.o.UID, e.o.GID)
	var errs []error
	if spec.User != "" && spec.User != own {
		errs = append(errs, fmt.Errorf("Spec.User %q differs from Options.UID/GID %s; set the user in Options: %w", spec.User, own, executor.ErrInvalid))
	}
	spec.User, spec.LeaseWait = own, cmp.Or(spec.LeaseWait, e.o.DefaultLeaseWait)
	spec, err := executor.Normalize(spec)
	p := plan{spec: spec, image: cmp.Or(spec.Image, e.o.Image), deadline: now.Add(spec.Timeout), chat: chatKey(spec.UserID, spec.ChatID)}
	if p.image == "" {
		errs = append(errs, fmt.Errorf("no image: set Spec.Image or Options.Image: %w", executor.ErrInvalid))
	}
	if err == nil {
		errs = append(errs, e.Capabilities().Check(spec)...)
	}
	if err := errors.Join(append(errs, err)...); err != nil {
		return plan{}, fmt.Errorf("kubernetes executor: %w", err)
	}
	return p, nil
}

// Capabilities implements executor.Executor (Options.Capabilities).
func (e *Executor) Capabilities() executor.Capabilities { return e.o.Capabilities() }

// Capabilities are what an executor with these options declares, known
// before New: pods have no network but the helper's relays, the node's
// process limit, the RuntimeClass of the Options, and the pod's helper as
// quota watchdog unless QuotaInterval turns it off.
func (o Options) Capabilities() executor.Capabilities {
	c := executor.Capabilities{Backend: "kubernetes", Quota: executor.QuotaWatchdog, Keep: true,
		Egress: o.EgressPort >= 0, ModelRelay: o.ModelPort >= 0, HostListener: true, Restore: true,
		Why: map[string]string{
			executor.KeyPids:    "a pod's process limit is its node's kubelet podPidsLimit; set that to the limit you want",
			executor.KeyRuntime: "select runtimes with Options.RuntimeClassName",
			executor.KeyNetwork: "the model and egress reach the gateway through the helper's relays",
			executor.KeyEgress:  "Options.EgressPort turns the relay off; leave it 0 for the default",
		}}
	if o.QuotaInterval < 0 {
		c.Quota = executor.QuotaVolume
	}
	// Checkpoints live on a chat's claims (checkpoints.go): an emptyDir
	// workspace has nothing to keep.
	c.Checkpoints = o.StorageClass != ""
	return c
}

// egressPort is the helper's egress relay port for p, 0 without egress.
func (p plan) egressPort(o Options) int {
	if !p.spec.Egress {
		return 0
	}
	return max(o.EgressPort, 0)
}

// pod builds the sandbox pod: the helper as main process, the container
// baseline as security context.
func (e *Executor) pod(p plan, name string) *corev1.Pod {
	o := e.o
	yes, no := true, false
	uid, gid := o.UID, o.GID
	grace := int64(max(o.StopGrace/time.Second, 1))
	active := int64(max(p.spec.Timeout/time.Second, 1))
	tmpfs := resource.NewQuantity(o.TmpfsBytes, resource.BinarySI)
	small := resource.NewQuantity(1<<20, resource.BinarySI)
	env := []corev1.EnvVar{{Name: "HOME", Value: o.Home}}
	for _, kv := range append(p.spec.Env, helper.ProxyEnv(p.egressPort(o))...) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	ws := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(p.spec.DiskBytes, resource.BinarySI)}}
	if o.StorageClass != "" {
		ws = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: p.claim}}
	}
	mem := func(limit *resource.Quantity) corev1.VolumeSource {
		return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: limit}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: o.Namespace,
			Labels: map[string]string{
				LabelManagedBy: managedBy,
				LabelChat:      p.chat,
				LabelInstance:  e.instanceHash(),
			},
			Annotations: map[string]string{
				AnnotationUser:     p.spec.UserID,
				AnnotationChat:     p.spec.ChatID,
				AnnotationImage:    p.spec.ConfigHash,
				AnnotationInstance: o.InstanceID,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The pod's pause process is PID 1 and reaps what the agent
			// orphans (the helper starts commands, it is no init). It
			// runs as another user: the sandbox sees it, cannot touch it.
			ShareProcessNamespace:         &yes,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			ActiveDeadlineSeconds:         &active,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				RunAsNonRoot:   &yes,
				FSGroup:        &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           p.image,
				ImagePullPolicy: corev1.PullPolicy(o.ImagePullPolicy),
				Command: helper.ServeArgs(o.HelperPath, helper.ServeOptions{
					Dir:        helper.ContainerDir,
					Workdir:    executor.ContainerWorkdir,
					Deadline:   p.deadline,
					KillGrace:  o.StopGrace,
					ExecPort:   HelperPort,
					ModelPort:  max(o.ModelPort, 0),
					EgressPort: p.egressPort(o),
					Reverse:    true,
				}),
				WorkingDir: executor.ContainerWorkdir,
				Env:        env,
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(p.spec.CPUs*1000), resource.DecimalSI),
						corev1.ResourceMemory: *resource.NewQuantity(p.spec.MemoryBytes, resource.BinarySI),
					},
					// Small requests so a node holds as many sandboxes as
					// actually fit; the limits above are what a sandbox gets.
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    *resource.NewMilliQuantity(min(int64(p.spec.CPUs*1000), 100), resource.DecimalSI),
						corev1.ResourceMemory: *resource.NewQuantity(min(p.spec.MemoryBytes, 64<<20), resource.BinarySI),
					},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: volWorkspace, MountPath: executor.ContainerWorkdir},
					{Name: volTmp, MountPath: "/tmp"},
					{Name: volHome, MountPath: o.Home},
					{Name: volRun, MountPath: helper.ContainerDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: volWorkspace, VolumeSource: ws},
				{Name: volTmp, VolumeSource: mem(tmpfs)},
				{Name: volHome, VolumeSource: mem(tmpfs)},
				{Name: volRun, VolumeSource: mem(small)},
			},
		},
	}
	if o.RuntimeClassName != "" {
		rc := o.RuntimeClassName
		pod.Spec.RuntimeClassName = &rc
	}
	return pod
}

// claim builds a chat's workspace PersistentVolumeClaim, named p.claim.
func (e *Executor) claim(p plan) *corev1.PersistentVolumeClaim {
	sc := e.o.StorageClass
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.claim,
			Namespace: e.o.Namespace,
			Labels:    map[string]string{LabelManagedBy: managedBy, LabelChat: p.chat},
			Annotations: map[string]string{
				AnnotationUser:         p.spec.UserID,
				AnnotationChat:         p.spec.ChatID,
				AnnotationSandboxImage: p.image,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(p.spec.DiskBytes, resource.BinarySI)},
			},
		},
	}
}
