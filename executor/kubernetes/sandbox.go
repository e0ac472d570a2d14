package kubernetes

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// Sandbox is one pod holding one chat's lease.
type Sandbox struct {
	e    *Executor
	name string
	plan plan
	pf   portForward
	hc   *helper.Client // the pod's helper, over pf

	// quotaStop and quotaDone stop and await the quota watchdog (nil
	// without one); quotaErr, under mu, is why it stopped the pod.
	quotaStop context.CancelFunc
	quotaDone chan struct{}

	// begun, for a pooled pod just adopted, ends its pool entry's mark in
	// the executor's registry once Create registered it as the chat's.
	begun func()

	// relMu guards release (the chat's leases; nil while parked) and
	// parked.
	relMu   sync.Mutex
	release func(context.Context)
	parked  bool

	closeOnce sync.Once
	closeErr  error
	mu        sync.Mutex
	closed    bool
	quotaErr  error
}

var (
	_ executor.Sandbox      = (*Sandbox)(nil)
	_ executor.Restorer     = (*Sandbox)(nil)
	_ executor.HostListener = (*Sandbox)(nil)
)

// newSandbox returns the Sandbox of pod name, its helper client reaching
// HelperPort through the pod's port forward.
func newSandbox(e *Executor, name string, p plan) *Sandbox {
	s := &Sandbox{e: e, name: name, plan: p}
	s.hc = helper.NewDialClient("pod "+name+" port "+strconv.Itoa(HelperPort), s.dialHelper)
	return s
}

// dialHelper reaches the helper's exec port through the port forward.
func (s *Sandbox) dialHelper(ctx context.Context) (net.Conn, error) {
	if s.e.helperDial != nil {
		return s.e.helperDial(ctx, s.name)
	}
	return s.DialPort(ctx, HelperPort)
}

// reverseIdle is how many connections a host listener keeps parked in the
// pod's helper: a second one is ready while the first is taken.
const reverseIdle = 2

// ListenHost returns the gateway's end of the helper's relay for the host
// socket name (helper.ModelSocket, EgressSocket, MCPSocket): connections
// parked in the helper through the port forward, returned by Accept when
// a process in the pod connects to the relay. Close it when the run ends.
func (s *Sandbox) ListenHost(_ context.Context, name string) (net.Listener, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("kubernetes executor: listen for %s: sandbox closed: %w", name, executor.ErrNotRunning)
	}
	ln, err := helper.ListenReverse(s.dialHelper, name, reverseIdle)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: %w", err)
	}
	return ln, nil
}

// ModelBaseURL is the agent's model endpoint inside the pod (the helper's
// relay to the gateway), or "" with Options.ModelPort negative.
func (s *Sandbox) ModelBaseURL() string {
	if s.e.o.ModelPort <= 0 {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(s.e.o.ModelPort)
}

// EgressProxyURL is the agent's HTTP_PROXY inside the pod (the helper's
// relay back to the gateway's egress proxy, ListenHost of
// helper.EgressSocket), or "" when the sandbox was not created with
// Spec.Egress.
func (s *Sandbox) EgressProxyURL() string {
	port := s.plan.egressPort(s.e.o)
	if port == 0 {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(port)
}

// ID is the pod's name.
func (s *Sandbox) ID() string { return s.name }

// Workdir is the workspace inside the pod.
func (s *Sandbox) Workdir() string { return executor.ContainerWorkdir }

// HostDir is "": a pod shares no directory with the gateway.
func (s *Sandbox) HostDir() string { return "" }

// Close begins the pod's deletion (its container stopped with the stop
// grace) and releases the chat's lease without waiting for the pod to be
// gone: the chat's next Create waits for that, on whichever replica, and
// Executor.Close waits for all of its pods. The workspace claim stays.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.stopQuota()
		_ = s.hc.Close()
		s.closePF()
		// Not waiting for the pod to be gone (about two seconds after
		// the container stopped): the chat's next Create waits for it, on
		// any replica, so a workspace never has two pods.
		s.closeErr = s.e.beginDelete(context.WithoutCancel(ctx), s.name)
		s.e.touchClaim(ctx, s.plan)
		s.e.sandboxes.Forget(s.name)
		s.e.pool.refill(s.plan)
		s.e.succ.follow(s)
		s.relMu.Lock()
		if s.release != nil {
			s.release(ctx)
			s.release = nil
		}
		s.relMu.Unlock()
	})
	return s.closeErr
}

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// ReadFile reads a workspace file through the pod's helper, which
// applies the host-side Workspace's rules inside the pod (no link
// followed, FIFOs and devices refused, sizes capped).
func (s *Sandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return s.hc.ReadFile(ctx, name)
}

// WriteFile writes a workspace file through the pod's helper.
func (s *Sandbox) WriteFile(ctx context.Context, name string, data []byte) error {
	return s.hc.WriteFile(ctx, name, data)
}

// RestoreFile restores a host-owned file through the pod's helper (see
// executor.Workspace.RestoreFile).
func (s *Sandbox) RestoreFile(ctx context.Context, name string, data []byte) error {
	return s.hc.RestoreFile(ctx, name, data)
}

// WriteToken gives the pod's helper the request's MCP token (its
// /run/agentbox/token, which `agentbox-helper mcp` presents).
func (s *Sandbox) WriteToken(ctx context.Context, token string) error {
	return s.hc.WriteToken(ctx, token)
}

// ListDir lists a workspace directory through the pod's helper.
func (s *Sandbox) ListDir(ctx context.Context, name string) ([]executor.FileInfo, error) {
	return s.hc.ListDir(ctx, name)
}

// Stat describes a workspace entry through the pod's helper.
func (s *Sandbox) Stat(ctx context.Context, name string) (executor.FileInfo, error) {
	return s.hc.Stat(ctx, name)
}

// EditFile edits a workspace file through the pod's helper.
func (s *Sandbox) EditFile(ctx context.Context, name string, edits []executor.Edit) (executor.EditResult, error) {
	return s.hc.EditFile(ctx, name, edits)
}
