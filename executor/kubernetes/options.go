package kubernetes

import (
	"fmt"
	"path"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of Options and of the pod baseline. A Spec's zero limits take
// executor's table (executor.Normalize), as on every backend;
// DefaultLeaseWait, DefaultMaxOutput, the sandbox user's ids and the
// retention's are the table's. None of them is "unlimited".
const (
	DefaultNamespace    = "agentbox"
	DefaultLeaseWait    = executor.DefaultLeaseWait
	DefaultStopGrace    = 2 * time.Second
	DefaultCallTimeout  = 30 * time.Second
	DefaultReadyTimeout = 2 * time.Minute
	DefaultExecTimeout  = 10 * time.Minute
	DefaultMaxOutput    = executor.DefaultMaxOutput
	DefaultTmpfsBytes   = 256 << 20
	// DefaultLeaseDuration is how long a chat or instance lease protects
	// its holder after its last renewal; a dead replica's chats are taken
	// over that long (plus ClockSkew) after it stopped.
	DefaultLeaseDuration     = 15 * time.Second
	DefaultClockSkew         = 2 * time.Second
	DefaultReconcileInterval = 30 * time.Second
	// DefaultUID and DefaultGID are the table's sandbox user: above the
	// ranges distributions give to accounts.
	DefaultUID  = executor.DefaultUID
	DefaultGID  = executor.DefaultGID
	DefaultHome = "/home/agent"
	// ImageHelperPath is where sandbox images built by examples/images bake
	// the helper, which runs as the pod's main process.
	ImageHelperPath = "/usr/local/bin/agentbox-helper"
	// ContainerName is the sandbox container's name in the pod.
	ContainerName = "sandbox"
	// PathKubeExec is ExecResult.Path for commands run through the API
	// server's exec subresource.
	PathKubeExec = "kube-exec"
	// PathHelper is ExecResult.Path for commands run through the pod's
	// helper over the port forward.
	PathHelper = "helper"
	// HelperPort is the loopback port in the pod where the helper serves
	// exec and the workspace file API; the gateway reaches it through the
	// API server's portforward subresource.
	HelperPort = 7690
	// DefaultModelPort is the loopback port in the pod where the helper
	// relays the agent's model traffic back to the gateway.
	DefaultModelPort = 7000
	// DefaultEgressPort is the loopback port in the pod where the helper
	// relays a sandbox's egress (Spec.Egress) back to the gateway.
	DefaultEgressPort = 7001
	// DefaultQuotaInterval is how often a workspace is measured.
	DefaultQuotaInterval = 2 * time.Second
	// DefaultRetention and DefaultRetentionInterval are the table's: a
	// workspace unused for a week goes, swept hourly.
	DefaultRetention         = executor.DefaultRetention
	DefaultRetentionInterval = executor.DefaultRetentionInterval
	// DefaultPoolIdle is how long a pooled pod waits unused.
	DefaultPoolIdle = executor.DefaultPoolIdle
	// MaxSuccessors bounds Options.Successors.
	MaxSuccessors = 1024
)

// Options configures an Executor. Namespace and Image have defaults; a
// Kubeconfig (or the in-cluster service account) is required.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; "" uses the in-cluster
	// configuration (the pod's service account).
	Kubeconfig string
	// Namespace holds the sandbox pods and workspace claims; the gateway
	// needs pods, pods/exec and persistentvolumeclaims there, nothing else.
	Namespace string
	// Logger receives lifecycle steps at debug and failures at warn; nil
	// means hclog.NewNullLogger().
	Logger hclog.Logger
	// InstanceID names this executor in pod labels; "" picks a random one.
	InstanceID string
	// Image is used when Spec.Image is empty. It must contain the helper at
	// HelperPath and /bin/sh.
	Image string
	// CheckpointImage is the image of the checkpoint pods (any sandbox
	// image: they run its helper). Empty: Image, else the image of the
	// last sandbox this executor created, else the one the chat's
	// workspace claim records; a stack (agentbox.New) sets it to its
	// first assistant's image.
	CheckpointImage string
	// ImagePullPolicy is "IfNotPresent" when empty; offline clusters that
	// import images use "Never".
	ImagePullPolicy string
	// HelperPath is the helper inside the image (ImageHelperPath when "").
	HelperPath string
	// RuntimeClassName selects the pod's RuntimeClass ("nonet" on the
	// offline test cluster, "gvisor" where installed); "" leaves the
	// cluster's default.
	RuntimeClassName string
	// StorageClass, when set, gives every chat a PersistentVolumeClaim of
	// that class for its workspace; "" uses an emptyDir per pod, which does
	// not outlive the request.
	StorageClass string
	// UID and GID run the sandbox (DefaultUID/DefaultGID when 0; root is
	// refused).
	UID, GID int64
	// Home is the sandbox user's HOME (a memory-backed emptyDir).
	Home string
	// TmpfsBytes caps each memory-backed emptyDir (/tmp, HOME).
	TmpfsBytes int64
	// DefaultLeaseWait is used when Spec.LeaseWait is 0.
	DefaultLeaseWait time.Duration
	// StopGrace is the pod's termination grace period and a stopped
	// command's SIGTERM→SIGKILL delay.
	StopGrace time.Duration
	// CallTimeout bounds each short API call (create, get, delete).
	CallTimeout time.Duration
	// ReadyTimeout bounds how long Create waits for the pod to run.
	ReadyTimeout time.Duration
	// ExecTimeout and MaxOutput are the defaults of Cmd.Timeout and
	// Cmd.MaxOutput.
	ExecTimeout time.Duration
	MaxOutput   int64
	// ModelPort is the loopback port in the pod where the helper relays
	// model traffic to the gateway over connections the gateway parks
	// through the port forward (Sandbox.ListenHost, ModelBaseURL);
	// DefaultModelPort when 0, negative turns the relay off.
	ModelPort int
	// Retention is how long a chat's workspace claim (StorageClass) is kept
	// after a sandbox on it last closed: the sweep deletes claims unused
	// for longer, skipping chats in use on any replica. 0 means
	// DefaultRetention; negative keeps claims forever. RetentionInterval
	// is how often the sweep runs (DefaultRetentionInterval when 0;
	// negative turns it off, e.g. on all but one replica).
	Retention         time.Duration
	RetentionInterval time.Duration
	// QuotaInterval is how often the pod's helper measures the workspace
	// against the Spec's DiskBytes and Inodes; over either, the pod is
	// stopped and its commands fail with executor.ErrNoSpace (a fast writer
	// overshoots by what it writes in one interval). 0 means
	// DefaultQuotaInterval; negative turns the watchdog off, for storage
	// classes that enforce the claim's size themselves (hostPath and
	// local-path volumes do not, nor does the kubelet between its eviction
	// sweeps of an emptyDir).
	QuotaInterval time.Duration
	// EgressPort is the loopback port in the pod where the helper relays
	// the egress of a sandbox created with Spec.Egress (its HTTP_PROXY) to
	// the gateway's egress proxy over parked connections, as ModelPort;
	// DefaultEgressPort when 0, negative turns egress off (a Spec asking
	// for it is refused).
	EgressPort int
	// LeaseDuration is how long a chat's Lease object protects the replica
	// holding it after its last renewal (renewed every third of it), and
	// the same for the executor's instance lease; at least 1 s.
	LeaseDuration time.Duration
	// ClockSkew is added to LeaseDuration before a lease counts as expired
	// on another replica, whose clock may differ by that much.
	ClockSkew time.Duration
	// ReconcileInterval is how often the executor removes the pods and
	// leases of gateway instances whose instance lease expired (once at New
	// too, and at once after a lease is taken over from a holder that
	// stopped renewing it); negative turns the reconciler off.
	ReconcileInterval time.Duration
	// Pool is how many started pods to keep ready, per sandbox
	// configuration, for the first request of new chats (each with a claim
	// of its own when StorageClass is set); 0 turns the pool off. See
	// pool.go.
	Pool int
	// PoolIdle is how long a pooled or successor pod waits unused before
	// it is removed; 0 means DefaultPoolIdle.
	PoolIdle time.Duration
	// Successors is how many successor pods may wait at once, all chats
	// together: when a chat's sandbox closes under the request policy, a
	// pod of the same configuration over the chat's claim starts for its
	// next request (needs StorageClass); 0 turns them off, at most
	// MaxSuccessors. Each holds its requests while it waits. See
	// successor.go.
	Successors int
}

func (o Options) withDefaults() (Options, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.InstanceID == "" {
		o.InstanceID = randomID()[:16]
	} else if err := executor.ValidateID("instance id", o.InstanceID); err != nil {
		return o, fmt.Errorf("kubernetes executor: %w", err)
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = "IfNotPresent"
	case "Always", "IfNotPresent", "Never":
	default:
		return o, fmt.Errorf("kubernetes executor: Options.ImagePullPolicy %q; use Always, IfNotPresent or Never: %w", o.ImagePullPolicy, executor.ErrInvalid)
	}
	if o.HelperPath == "" {
		o.HelperPath = ImageHelperPath
	}
	if o.UID == 0 {
		o.UID = DefaultUID
	}
	if o.GID == 0 {
		o.GID = DefaultGID
	}
	if o.UID < 0 || o.GID < 0 {
		return o, fmt.Errorf("kubernetes executor: Options.UID/GID %d:%d; use ids above 0 (root is never used): %w", o.UID, o.GID, executor.ErrInvalid)
	}
	if o.Home == "" {
		o.Home = DefaultHome
	}
	if !path.IsAbs(o.Home) || path.Clean(o.Home) == "/" {
		return o, fmt.Errorf("kubernetes executor: Options.Home %q must be an absolute directory other than /: %w", o.Home, executor.ErrInvalid)
	}
	if o.TmpfsBytes <= 0 {
		o.TmpfsBytes = DefaultTmpfsBytes
	}
	setDuration(&o.DefaultLeaseWait, DefaultLeaseWait)
	setDuration(&o.StopGrace, DefaultStopGrace)
	setDuration(&o.CallTimeout, DefaultCallTimeout)
	setDuration(&o.ReadyTimeout, DefaultReadyTimeout)
	setDuration(&o.ExecTimeout, DefaultExecTimeout)
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.ModelPort == 0 {
		o.ModelPort = DefaultModelPort
	}
	if o.ModelPort > 65535 || o.ModelPort == HelperPort {
		return o, fmt.Errorf("kubernetes executor: Options.ModelPort %d; use a free port below 65536 other than %d: %w", o.ModelPort, HelperPort, executor.ErrInvalid)
	}
	switch {
	case o.StorageClass == "" && o.Retention > 0:
		return o, fmt.Errorf("kubernetes executor: Options.Retention %v applies to workspace claims; set StorageClass or drop it (an emptyDir workspace ends with its pod): %w", o.Retention, executor.ErrInvalid)
	case o.StorageClass != "" && o.Retention == 0:
		o.Retention = DefaultRetention
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = DefaultRetentionInterval
	}
	if o.QuotaInterval == 0 {
		o.QuotaInterval = DefaultQuotaInterval
	}
	if o.EgressPort == 0 {
		o.EgressPort = DefaultEgressPort
	}
	if o.EgressPort > 65535 || o.EgressPort == HelperPort || (o.EgressPort > 0 && o.EgressPort == o.ModelPort) {
		return o, fmt.Errorf("kubernetes executor: Options.EgressPort %d; use a free port below 65536 apart from ModelPort and %d: %w", o.EgressPort, HelperPort, executor.ErrInvalid)
	}
	setDuration(&o.LeaseDuration, DefaultLeaseDuration)
	if o.LeaseDuration < time.Second {
		return o, fmt.Errorf("kubernetes executor: Options.LeaseDuration %v; Lease objects count in seconds, use 1s or more: %w", o.LeaseDuration, executor.ErrInvalid)
	}
	if o.ClockSkew < 0 {
		return o, fmt.Errorf("kubernetes executor: Options.ClockSkew %v is negative: %w", o.ClockSkew, executor.ErrInvalid)
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	switch {
	case o.Successors < 0 || o.Successors > MaxSuccessors:
		return o, fmt.Errorf("kubernetes executor: Options.Successors %d is out of range; give 0 (off) to %d pods: %w", o.Successors, MaxSuccessors, executor.ErrInvalid)
	case o.Successors > 0 && o.StorageClass == "":
		return o, fmt.Errorf("kubernetes executor: Options.Successors needs Options.StorageClass: without a claim a chat's next pod starts with an empty workspace anyway; set StorageClass or drop Successors: %w", executor.ErrInvalid)
	}
	// PoolIdle bounds a successor's wait too.
	n := o.Pool
	if n == 0 && o.Successors > 0 {
		n = 1
	}
	idle, err := executor.PoolIdle(n, o.PoolIdle)
	if err != nil {
		return o, fmt.Errorf("kubernetes executor: %w", err)
	}
	o.PoolIdle = idle
	return o, nil
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}
