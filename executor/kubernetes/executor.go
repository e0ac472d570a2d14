package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentbox/agentbox/executor"
)

// Executor creates sandboxes as pods. Create it with New; Close it once.
type Executor struct {
	o      Options
	cfg    *rest.Config
	cs     kubernetes.Interface
	logger hclog.Logger
	leases *executor.Leases

	sandboxes *executor.Registry[*Sandbox] // by pod name

	// helperDial, when set (unit tests over a fake clientset), reaches the
	// helper instead of the pod's port forward.
	helperDial func(ctx context.Context, pod string) (net.Conn, error)

	bg       context.Context // ends at Close: lease renewals, the reconciler
	stopBG   context.CancelFunc
	wg       sync.WaitGroup
	instance *heldLease // this executor's instance lease (New)
	// kick asks the reconciler for a pass now: a lease taken over from a
	// holder that stopped renewing means that instance is likely dead,
	// and its other pods need not wait for the next interval.
	kick chan struct{}
	// lastImage is the image of the last sandbox Create planned: every
	// sandbox image carries the helper a checkpoint pod runs.
	lastImage atomic.Pointer[string]
	pool      *pool       // nil without Options.Pool
	succ      *successors // nil without Options.Successors
}

var _ executor.Executor = (*Executor)(nil)

// New loads the kubeconfig (or the in-cluster configuration), checks that
// the API server answers and that the namespace exists.
func New(ctx context.Context, o Options) (*Executor, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var cfg *rest.Config
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: load the cluster configuration (Options.Kubeconfig %q; empty means in-cluster): %w", o.Kubeconfig, err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "agentbox"
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: client: %w", err)
	}
	e := newExecutor(o, cfg, cs)
	cctx, cancel := context.WithTimeout(ctx, o.CallTimeout)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Get(cctx, o.Namespace, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("kubernetes executor: namespace %q does not exist; create it (kubectl create namespace %s) or set Options.Namespace: %w", o.Namespace, o.Namespace, executor.ErrInvalid)
		}
		if apierrors.IsForbidden(err) {
			// A gateway confined to its namespace may not read namespaces.
			e.logger.Debug("cannot read the namespace object; going on", "namespace", o.Namespace)
		} else {
			return nil, fmt.Errorf("kubernetes executor: the API server at %s does not answer: %w (%w)", cfg.Host, executor.ErrUnavailable, err)
		}
	}
	if err := e.start(ctx); err != nil {
		e.stopBG()
		return nil, fmt.Errorf("kubernetes executor: instance %s: %w", o.InstanceID, err)
	}
	e.logQuota()
	return e, nil
}

// newExecutor builds an Executor over cs (a fake clientset in unit tests).
func newExecutor(o Options, cfg *rest.Config, cs kubernetes.Interface) *Executor {
	e := &Executor{o: o, cfg: cfg, cs: cs, logger: o.Logger.Named("kubernetes").With("instance", o.InstanceID), leases: executor.NewLeases(), sandboxes: executor.NewRegistry[*Sandbox](), kick: make(chan struct{}, 1)}
	e.bg, e.stopBG = context.WithCancel(context.Background())
	e.pool = e.openPool()
	e.succ = e.openSuccessors()
	return e
}

// Create leases the chat, removes any pod left on it, makes the workspace
// claim when a StorageClass is set, creates the pod and waits until its
// container runs.
func (e *Executor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	p, err := e.plan(spec, time.Now())
	if err != nil {
		return nil, err
	}
	e.lastImage.Store(&p.image)
	name := "abx-" + p.chat[:12] + "-" + randomID()[:8]
	done, err := e.sandboxes.Begin(name)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: %w", err)
	}
	defer done()

	wait := p.spec.LeaseWait
	local, err := e.leases.Acquire(ctx, p.chat, wait)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: chat %s/%s: %w", spec.UserID, spec.ChatID, err)
	}
	// Across replicas: the chat's Lease object.
	cl, err := e.acquireLease(ctx, chatLeasePrefix+p.chat, wait, map[string]string{AnnotationUser: spec.UserID, AnnotationChat: spec.ChatID})
	if err != nil {
		local()
		return nil, fmt.Errorf("kubernetes executor: chat %s/%s: %w", spec.UserID, spec.ChatID, err)
	}
	release := func(ctx context.Context) {
		cl.release(ctx)
		local()
	}
	sb, err := e.create(ctx, p, name)
	if err != nil {
		release(ctx)
		return nil, err
	}
	sb.release = release
	err = e.sandboxes.Add(ctx, sb.name, sb)
	if sb.begun != nil {
		// An adopted pooled pod: registered as open (or closed) now.
		sb.begun()
		sb.begun = nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: chat %s/%s: %w", spec.UserID, spec.ChatID, err)
	}
	return sb, nil
}

func (e *Executor) create(ctx context.Context, p plan, name string) (*Sandbox, error) {
	t0 := time.Now()
	if sb := e.succ.adopt(ctx, p); sb != nil {
		// Any other pod of the chat (none unless another replica left
		// one) still goes first.
		if err := e.removeChatPods(ctx, p.chat, sb.name); err != nil {
			sb.closePF()
			sb.stopQuota()
			_ = e.deletePod(context.WithoutCancel(ctx), sb.name)
			sb.begun()
			return nil, err
		}
		return sb, nil
	}
	if err := e.removeChatPods(ctx, p.chat, ""); err != nil {
		return nil, err
	}
	var claim *corev1.PersistentVolumeClaim
	if e.o.StorageClass != "" {
		var err error
		if claim, err = e.workspaceClaim(ctx, p.chat); err != nil {
			return nil, err
		}
	}
	if sb, tried := e.fromPool(ctx, p, claim); sb != nil {
		return sb, nil
	} else if tried && e.o.StorageClass != "" {
		// A failed adoption may have deleted the chat's unbound claim or
		// made the pooled one the chat's.
		var err error
		if claim, err = e.workspaceClaim(ctx, p.chat); err != nil {
			return nil, err
		}
	}
	if e.o.StorageClass != "" {
		if err := e.ensureClaim(ctx, &p, claim); err != nil {
			return nil, err
		}
	}
	pod := e.pod(p, name)
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	_, err := e.cs.CoreV1().Pods(e.o.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return nil, e.apiError("create pod "+name, err)
	}
	t1 := time.Now()
	sb := newSandbox(e, name, p)
	err = e.waitStarted(ctx, sb)
	if err == nil {
		err = sb.startQuota(ctx)
	}
	if err != nil {
		// The pod may be half made: remove it on a context the caller
		// cannot cancel.
		sb.closePF()
		_ = e.deletePod(context.WithoutCancel(ctx), name)
		return nil, err
	}
	e.logger.Debug("sandbox pod running", "pod", name, "user", p.spec.UserID, "chat", p.spec.ChatID,
		"api_calls", t1.Sub(t0), "until_helper", time.Since(t1))
	return sb, nil
}

// workspaceClaim finds the chat's workspace claim by its label, whatever
// its name (claimName, or an adopted pooled pod's); nil when the chat has
// none. Should there be two, the oldest is the chat's.
func (e *Executor) workspaceClaim(ctx context.Context, chat string) (*corev1.PersistentVolumeClaim, error) {
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	sel := LabelChat + "=" + chat + "," + LabelRole + "!=" + RoleCheckpoint
	list, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, e.apiError("list the chat's workspace claims", err)
	}
	var c *corev1.PersistentVolumeClaim
	for i := range list.Items {
		it := &list.Items[i]
		if it.Labels[LabelChat] != chat || isCheckpoint(it.Labels) {
			continue // a selector the server (or a fake) did not apply
		}
		if c == nil || it.CreationTimestamp.Before(&c.CreationTimestamp) {
			c = it
		}
	}
	return c, nil
}

// ensureClaim sets p.claim to the chat's workspace claim c, creating it
// (named claimName) when c is nil.
func (e *Executor) ensureClaim(ctx context.Context, p *plan, c *corev1.PersistentVolumeClaim) error {
	if c != nil {
		p.claim = c.Name
		return nil
	}
	p.claim = claimName(p.spec.UserID, p.spec.ChatID)
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	_, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Create(cctx, e.claim(*p), metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return e.apiError("create workspace claim "+p.claim, err)
}

// waitStarted returns once the pod's helper answers through the port
// forward. That is often before the pod's status says its container runs:
// the kubelet notices a started container on its next relist, up to a
// second later. The pod's status is still watched, to fail at once on a
// state the pod will not leave (a bad image, a container that exited).
func (e *Executor) waitStarted(ctx context.Context, sb *Sandbox) (err error) {
	defer func() { err = e.unscheduled(ctx, sb.name, err) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	running, helper := make(chan error, 1), make(chan error, 1)
	go func() { running <- e.waitRunning(ctx, sb.name) }()
	go func() { helper <- e.waitHelper(ctx, sb) }()
	for {
		select {
		case err := <-running:
			if err != nil {
				return err
			}
			running = nil // the container runs; the helper answers soon
		case err := <-helper:
			return err
		}
	}
}

// waitRunning watches the pod until its sandbox container runs, failing
// early on a state it will not leave by itself.
func (e *Executor) waitRunning(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeoutCause(ctx, e.o.ReadyTimeout,
		fmt.Errorf("pod %s did not start within %v (Options.ReadyTimeout); see kubectl -n %s describe pod %s: %w", name, e.o.ReadyTimeout, e.o.Namespace, name, executor.ErrTimeout))
	defer cancel()
	pods := e.cs.CoreV1().Pods(e.o.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return e.waitError(ctx, name, err)
		}
		for i := range list.Items {
			if list.Items[i].Name != name {
				continue
			}
			if done, err := podStarted(&list.Items[i]); done || err != nil {
				return err
			}
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return e.waitError(ctx, name, err)
		}
		done, err := watchStarted(ctx, w, name)
		w.Stop()
		if done || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return e.waitError(ctx, name, ctx.Err())
		}
	}
}

// unscheduled adds to err, when it is a pod's start that timed out, why
// the scheduler has not placed the pod, when that is why (no volume for
// its claim, no node with room): the cause kubectl describe would show.
func (e *Executor) unscheduled(ctx context.Context, name string, err error) error {
	if !errors.Is(err, executor.ErrTimeout) {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.CallTimeout)
	defer cancel()
	pod, gerr := e.cs.CoreV1().Pods(e.o.Namespace).Get(cctx, name, metav1.GetOptions{})
	if gerr != nil {
		return err
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Errorf("%w (not scheduled: %s: %s)", err, c.Reason, c.Message)
		}
	}
	return err
}

// watchStarted follows w until the pod started, failed or was deleted; it
// returns done=false when the watch ended first (the caller lists again).
// Objects of other names are skipped (a field selector the server, or a
// fake, did not apply).
func watchStarted(ctx context.Context, w watch.Interface, name string) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Error {
				return false, nil
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || pod.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				return true, fmt.Errorf("kubernetes executor: pod %s was deleted while starting: %w", name, executor.ErrSandboxGone)
			}
			if done, err := podStarted(pod); done || err != nil {
				return true, err
			}
		}
	}
}

// waitHelper waits until the pod's helper answers through the port
// forward (the container runs before the helper listens).
func (e *Executor) waitHelper(ctx context.Context, sb *Sandbox) error {
	ctx, cancel := context.WithTimeoutCause(ctx, e.o.ReadyTimeout,
		fmt.Errorf("the helper of pod %s did not answer on port %d within %v (Options.ReadyTimeout); see kubectl -n %s logs %s: %w", sb.name, HelperPort, e.o.ReadyTimeout, e.o.Namespace, sb.name, executor.ErrTimeout))
	defer cancel()
	// Every attempt before the helper listens is a port forward that the
	// API server and the runtime log as failed: a few per start. Until a
	// port forward reaches the pod (its network namespace exists) they
	// are 100 ms apart; from then on the helper listens within tens of
	// milliseconds, and they are 10 ms apart.
	pace := func() time.Duration {
		if sb.pf.reached.Load() {
			return 10 * time.Millisecond
		}
		return 100 * time.Millisecond
	}
	if err := sb.hc.WaitReadyPaced(ctx, pace); err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return fmt.Errorf("kubernetes executor: %w (last error: %w)", cause, err)
		}
		return fmt.Errorf("kubernetes executor: pod %s: %w", sb.name, err)
	}
	return nil
}

func (e *Executor) waitError(ctx context.Context, name string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("kubernetes executor: %w", cause)
	}
	return e.apiError("wait for pod "+name, err)
}

// podStarted reports whether the sandbox container runs, or why it never
// will.
func podStarted(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, fmt.Errorf("kubernetes executor: pod %s ended before it was used (%s: %s %s): %w", pod.Name, pod.Status.Phase, pod.Status.Reason, pod.Status.Message, executor.ErrNotRunning)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		if cs.State.Running != nil {
			return true, nil
		}
		if t := cs.State.Terminated; t != nil {
			return true, fmt.Errorf("kubernetes executor: the sandbox container of pod %s exited (%s, code %d: %s); is the helper in the image and executable?: %w", pod.Name, t.Reason, t.ExitCode, t.Message, executor.ErrNotRunning)
		}
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "ImagePullBackOff", "ErrImagePull", "RunContainerError":
				return true, fmt.Errorf("kubernetes executor: pod %s cannot start its container: %s: %s (check the image name, that the node has it, and the pod's security settings): %w", pod.Name, w.Reason, w.Message, executor.ErrNotRunning)
			}
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			// Unschedulable may clear when another sandbox ends; keep
			// waiting until ReadyTimeout.
			return false, nil
		}
	}
	return false, nil
}

// removeChatPods deletes every pod still labelled with the chat (left by a
// crashed gateway, a successor another replica started) but keep, and
// waits until they are gone, so two pods never share a workspace.
func (e *Executor) removeChatPods(ctx context.Context, chat, keep string) error {
	cctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	list, err := e.cs.CoreV1().Pods(e.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chat})
	cancel()
	if err != nil {
		return e.apiError("list pods of the chat", err)
	}
	var errs []error
	for _, pod := range list.Items {
		if pod.Name == keep {
			continue
		}
		if pod.DeletionTimestamp == nil {
			e.logger.Warn("removing a pod left on the chat", "pod", pod.Name)
		} else {
			// The previous request's pod: Close begins its deletion and
			// returns, the chat's next pod waits here until it is gone.
			e.logger.Debug("waiting for the chat's previous pod to be gone", "pod", pod.Name)
		}
		errs = append(errs, e.deletePod(ctx, pod.Name))
	}
	return errors.Join(errs...)
}

// deletePod deletes a pod with the stop grace and waits until the API server
// no longer has it.
func (e *Executor) deletePod(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout+2*e.o.StopGrace)
	defer cancel()
	if err := e.beginDelete(ctx, name); err != nil {
		return err
	}
	pods := e.cs.CoreV1().Pods(e.o.Namespace)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes executor: pod %s still exists after delete; is the kubelet of its node up?: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// beginDelete deletes a pod with the stop grace and returns at once: the
// kubelet stops its container (SIGTERM, then SIGKILL after the grace) and
// the API server drops it about two seconds later. A pod already gone is
// not an error.
func (e *Executor) beginDelete(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	grace := int64(max(e.o.StopGrace/time.Second, 1))
	bg := metav1.DeletePropagationBackground
	err := e.cs.CoreV1().Pods(e.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return e.apiError("delete pod "+name, err)
	}
	return nil
}

// waitPodsGone waits until the API server has no pod of this instance,
// at most CallTimeout and twice the stop grace.
func (e *Executor) waitPodsGone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout+2*e.o.StopGrace)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy + "," + LabelInstance + "=" + e.instanceHash()}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		list, err := e.cs.CoreV1().Pods(e.o.Namespace).List(ctx, sel)
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return e.apiError("list this instance's pods", err)
			}
			return fmt.Errorf("kubernetes executor: %d pods of this instance still exist after delete, e.g. %s; is the kubelet of their node up?: %w", len(list.Items), list.Items[0].Name, ctx.Err())
		case <-t.C:
		}
	}
}

// apiError names the operation and maps connection failures to
// executor.ErrUnavailable.
func (e *Executor) apiError(op string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes executor: %s: %w; give the gateway's account pods, pods/exec, pods/portforward, persistentvolumeclaims and leases (coordination.k8s.io) in namespace %s", op, err, e.o.Namespace)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Errorf("kubernetes executor: %s: %w (%w)", op, executor.ErrInvalid, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("kubernetes executor: %s: %w", op, err)
	case apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) || isConnError(err):
		return fmt.Errorf("kubernetes executor: %s: the API server at %s does not answer: %w (%w)", op, e.cfg.Host, executor.ErrUnavailable, err)
	}
	return fmt.Errorf("kubernetes executor: %s: %w", op, err)
}

func isConnError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "no such host") || strings.Contains(s, "connection reset")
}

// Close closes the sandboxes still open, refuses new ones, waits until
// the pods of this instance are gone, stops the reconciler and deletes the
// instance lease. Workspace claims are kept.
func (e *Executor) Close() error {
	if !e.sandboxes.Shut() {
		return nil
	}
	// The pooled pods first: each holds a mark CloseAll waits for.
	e.pool.close()
	e.succ.close()
	_, err := e.sandboxes.CloseAll(context.Background())
	err = errors.Join(err, e.waitPodsGone(context.Background()))
	e.stopBG()
	e.wg.Wait()
	if e.instance != nil {
		e.instance.release(context.Background())
	}
	return err
}

// abandon stops this executor as a kill -9 would: no renewal, no
// reconciler, nothing deleted (tests of takeover by another replica).
func (e *Executor) abandon() {
	e.sandboxes.Shut()
	e.stopBG()
	e.wg.Wait()
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
