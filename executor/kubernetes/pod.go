package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
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

// claimName is the workspace PersistentVolumeClaim of a chat.
func claimName(user, chat string) string { return "abx-ws-" + chatKey(user, chat) }

// plan is a validated Spec with the Options' defaults applied.
type plan struct {
	spec     executor.Spec
	image    string
	memory   int64
	cpus     float64
	disk     int64
	inodes   int64
	timeout  time.Duration
	deadline time.Time
	chat     string // chatKey
}

func (e *Executor) plan(spec executor.Spec, now time.Time) (plan, error) {
	if err := executor.ValidateID("user id", spec.UserID); err != nil {
		return plan{}, fmt.Errorf("kubernetes executor: %w", err)
	}
	if err := executor.ValidateID("chat id", spec.ChatID); err != nil {
		return plan{}, fmt.Errorf("kubernetes executor: %w", err)
	}
	p := plan{spec: spec, image: spec.Image, memory: spec.MemoryBytes, cpus: spec.CPUs, disk: spec.DiskBytes, inodes: spec.Inodes, timeout: spec.Timeout}
	if spec.DiskBytes < 0 || spec.Inodes < 0 {
		return plan{}, fmt.Errorf("kubernetes executor: Spec.DiskBytes %d, Inodes %d: negative is not unlimited; 0 takes the defaults: %w", spec.DiskBytes, spec.Inodes, executor.ErrInvalid)
	}
	if p.image == "" {
		p.image = e.o.Image
	}
	if p.image == "" {
		return plan{}, fmt.Errorf("kubernetes executor: no image: set Spec.Image or Options.Image: %w", executor.ErrInvalid)
	}
	if spec.Network != "" && spec.Network != "none" {
		return plan{}, fmt.Errorf("kubernetes executor: Spec.Network %q: pods get no network here; use a RuntimeClass (Options.RuntimeClassName) and the model relay instead: %w", spec.Network, executor.ErrInvalid)
	}
	if spec.Egress && e.o.EgressPort <= 0 {
		return plan{}, fmt.Errorf("kubernetes executor: Spec.Egress is asked for but Options.EgressPort turns the relay off; leave it 0 for the default: %w", executor.ErrInvalid)
	}
	if spec.Runtime != "" {
		return plan{}, fmt.Errorf("kubernetes executor: Spec.Runtime %q: select runtimes with Options.RuntimeClassName: %w", spec.Runtime, executor.ErrInvalid)
	}
	if spec.User != "" && spec.User != fmt.Sprintf("%d:%d", e.o.UID, e.o.GID) {
		return plan{}, fmt.Errorf("kubernetes executor: Spec.User %q differs from Options.UID/GID %d:%d; set the user in Options: %w", spec.User, e.o.UID, e.o.GID, executor.ErrInvalid)
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return plan{}, fmt.Errorf("kubernetes executor: Spec.Env entry %q is not KEY=VALUE: %w", kv, executor.ErrInvalid)
		}
	}
	if p.memory <= 0 {
		p.memory = DefaultMemoryBytes
	}
	if p.cpus <= 0 {
		p.cpus = DefaultCPUs
	}
	if p.disk <= 0 {
		p.disk = DefaultDiskBytes
	}
	if p.inodes <= 0 {
		// One per 8 KiB on small disks, as executor/docker.
		p.inodes = max(min(executor.DefaultInodes, p.disk/8192), 1000)
	}
	if p.timeout <= 0 {
		p.timeout = DefaultSandboxTimeout
	}
	p.deadline = now.Add(p.timeout)
	p.chat = chatKey(spec.UserID, spec.ChatID)
	return p, nil
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
	active := int64(max(p.timeout/time.Second, 1))
	tmpfs := resource.NewQuantity(o.TmpfsBytes, resource.BinarySI)
	small := resource.NewQuantity(1<<20, resource.BinarySI)
	env := []corev1.EnvVar{{Name: "HOME", Value: o.Home}}
	for _, kv := range append(p.spec.Env, helper.ProxyEnv(p.egressPort(o))...) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	ws := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(p.disk, resource.BinarySI)}}
	if o.StorageClass != "" {
		ws = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(p.spec.UserID, p.spec.ChatID)}}
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
						corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(p.cpus*1000), resource.DecimalSI),
						corev1.ResourceMemory: *resource.NewQuantity(p.memory, resource.BinarySI),
					},
					// Small requests so a node holds as many sandboxes as
					// actually fit; the limits above are what a sandbox gets.
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    *resource.NewMilliQuantity(min(int64(p.cpus*1000), 100), resource.DecimalSI),
						corev1.ResourceMemory: *resource.NewQuantity(min(p.memory, 64<<20), resource.BinarySI),
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

// claim builds a chat's workspace PersistentVolumeClaim.
func (e *Executor) claim(p plan) *corev1.PersistentVolumeClaim {
	sc := e.o.StorageClass
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      claimName(p.spec.UserID, p.spec.ChatID),
			Namespace: e.o.Namespace,
			Labels:    map[string]string{LabelManagedBy: managedBy, LabelChat: p.chat},
			Annotations: map[string]string{
				AnnotationUser: p.spec.UserID,
				AnnotationChat: p.spec.ChatID,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(p.disk, resource.BinarySI)},
			},
		},
	}
}
