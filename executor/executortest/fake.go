package executortest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// ExecFunc answers one Exec call of a FakeSandbox.
type ExecFunc func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error)

// ExecCall records one Exec call. Stdin holds what the command's stdin
// reader yielded (the ExecFunc gets a fresh reader over the same bytes).
type ExecCall struct {
	Args      []string
	Env       []string
	Dir       string
	Stdin     []byte
	Timeout   time.Duration
	MaxOutput int64
}

var sandboxSeq atomic.Int64

// FakeSandbox is a scriptable executor.Sandbox over a real Workspace.
type FakeSandbox struct {
	// ExecFunc answers Exec; nil makes Exec fail with a message saying no
	// ExecFunc was scripted. Set it before the first Exec.
	ExecFunc ExecFunc

	ws       *executor.Workspace
	id       string
	spec     executor.Spec
	deadline time.Time
	release  func()

	mu     sync.Mutex
	calls  []ExecCall
	closed bool
}

var _ executor.Sandbox = (*FakeSandbox)(nil)

// NewSandbox returns a FakeSandbox over a fresh workspace in t.TempDir(),
// closed when the test ends.
func NewSandbox(t testing.TB) *FakeSandbox {
	t.Helper()
	ws, err := executor.OpenWorkspace(t.TempDir(), executor.WorkspaceOptions{UID: -1, GID: -1})
	require.NoError(t, err)
	s := newSandbox(ws, executor.Spec{}, nil)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func newSandbox(ws *executor.Workspace, spec executor.Spec, release func()) *FakeSandbox {
	return &FakeSandbox{
		ws:       ws,
		id:       fmt.Sprintf("fake-%d", sandboxSeq.Add(1)),
		spec:     spec,
		deadline: time.Now().Add(cmp.Or(spec.Timeout, executor.DefaultTimeout)),
		release:  release,
	}
}

// ID returns "fake-N".
func (s *FakeSandbox) ID() string { return s.id }

// Workdir returns executor.ContainerWorkdir.
func (s *FakeSandbox) Workdir() string { return executor.ContainerWorkdir }

// HostDir returns "": the fake has no helper directory.
func (s *FakeSandbox) HostDir() string { return "" }

// Deadline is Spec.Timeout (or the table's default) after the sandbox was
// made; nothing ends it then.
func (s *FakeSandbox) Deadline() time.Time { return s.deadline }

// Dir returns the workspace's host directory.
func (s *FakeSandbox) Dir() string { return s.ws.Dir() }

// Spec returns the spec the sandbox was created with (zero for NewSandbox).
func (s *FakeSandbox) Spec() executor.Spec { return s.spec }

// Calls returns a copy of the Exec calls so far, in order.
func (s *FakeSandbox) Calls() []ExecCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Closed reports whether Close was called.
func (s *FakeSandbox) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Exec records the call and answers it with ExecFunc.
func (s *FakeSandbox) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	if cmd == nil || len(cmd.Args) == 0 {
		return executor.ExecResult{}, fmt.Errorf("exec: empty argv; set Cmd.Args: %w", executor.ErrInvalid)
	}
	c := *cmd
	call := ExecCall{
		Args:      slices.Clone(cmd.Args),
		Env:       slices.Clone(cmd.Env),
		Dir:       cmd.Dir,
		Timeout:   cmd.Timeout,
		MaxOutput: cmd.MaxOutput,
	}
	if cmd.Stdin != nil {
		in, err := io.ReadAll(cmd.Stdin)
		if err != nil {
			return executor.ExecResult{}, fmt.Errorf("exec %v: read stdin: %w", cmd.Args, err)
		}
		call.Stdin = in
		c.Stdin = bytes.NewReader(in)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return executor.ExecResult{}, fmt.Errorf("exec %v: %w", cmd.Args, executor.ErrNotRunning)
	}
	s.calls = append(s.calls, call)
	fn := s.ExecFunc
	s.mu.Unlock()
	if fn == nil {
		return executor.ExecResult{}, fmt.Errorf("exec %v: no ExecFunc scripted on FakeSandbox %s; set ExecFunc (or use HostExec)", cmd.Args, s.id)
	}
	return fn(ctx, &c)
}

// Close marks the sandbox closed, releases its lease and the workspace
// handle; it keeps the workspace's files. Later calls do nothing.
func (s *FakeSandbox) Close(context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.ws.Close()
	if s.release != nil {
		s.release()
	}
	return err
}

// running fails with ErrNotRunning once the sandbox is closed.
func (s *FakeSandbox) running(op, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s %s: %w", op, name, executor.ErrNotRunning)
	}
	return nil
}

// ReadFile reads from the workspace (see executor.Workspace).
func (s *FakeSandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if err := s.running("read", name); err != nil {
		return nil, err
	}
	return s.ws.ReadFile(ctx, name)
}

// WriteFile writes to the workspace (see executor.Workspace).
func (s *FakeSandbox) WriteFile(ctx context.Context, name string, data []byte) error {
	if err := s.running("write", name); err != nil {
		return err
	}
	return s.ws.WriteFile(ctx, name, data)
}

// ListDir lists a workspace directory (see executor.Workspace).
func (s *FakeSandbox) ListDir(ctx context.Context, name string) ([]executor.FileInfo, error) {
	if err := s.running("list", name); err != nil {
		return nil, err
	}
	return s.ws.ListDir(ctx, name)
}

// Stat describes a workspace entry (see executor.Workspace).
func (s *FakeSandbox) Stat(ctx context.Context, name string) (executor.FileInfo, error) {
	if err := s.running("stat", name); err != nil {
		return executor.FileInfo{}, err
	}
	return s.ws.Stat(ctx, name)
}

// EditFile edits a workspace file (see executor.Workspace).
func (s *FakeSandbox) EditFile(ctx context.Context, name string, edits []executor.Edit) (executor.EditResult, error) {
	if err := s.running("edit", name); err != nil {
		return executor.EditResult{}, err
	}
	return s.ws.EditFile(ctx, name, edits)
}

// FakeExecutor creates FakeSandboxes over the chats' workspaces in DataDir
// (executor.PrepareWorkspace)
// and holds one lease per chat: a second Create for a leased chat waits up
// to Spec.LeaseWait and then fails with ErrBusy. Spec limits are recorded,
// not enforced.
type FakeExecutor struct {
	// DataDir holds the workspaces.
	DataDir string
	// OnCreate, when set, is called with each new sandbox before Create
	// returns it: script its ExecFunc there (sb.ExecFunc = sb.HostExec).
	OnCreate func(sb *FakeSandbox)
	// CreateErr, when set, makes Create fail with it (after validation).
	CreateErr error
	// Caps, when set, is what Capabilities declares instead of
	// FakeCapabilities (e.g. another backend's, for refusals at start-up).
	Caps *executor.Capabilities

	mu      sync.Mutex
	leases  map[string]chan struct{}
	created []*FakeSandbox
	closed  bool
}

var _ executor.Executor = (*FakeExecutor)(nil)

// NewExecutor returns a FakeExecutor with DataDir in t.TempDir(), closed
// when the test ends.
func NewExecutor(t testing.TB) *FakeExecutor {
	t.Helper()
	e := &FakeExecutor{DataDir: t.TempDir()}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// FakeCapabilities are what a FakeExecutor declares by default: it takes
// every Spec setting (it records limits and enforces none) and its
// sandboxes implement none of the optional interfaces.
func FakeCapabilities() executor.Capabilities {
	return executor.Capabilities{Backend: "fake", Pids: true, Runtimes: []string{"runc", "runsc"}, Networks: true,
		Quota: executor.QuotaWatchdog, Egress: true}
}

// Capabilities returns Caps, or FakeCapabilities.
func (e *FakeExecutor) Capabilities() executor.Capabilities {
	if e.Caps != nil {
		return *e.Caps
	}
	return FakeCapabilities()
}

// Sandboxes returns every sandbox created so far, in order.
func (e *FakeExecutor) Sandboxes() []*FakeSandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.created)
}

// Create leases the chat, prepares its workspace and returns a FakeSandbox.
func (e *FakeExecutor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	if err := executor.ValidateID("user id", spec.UserID); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if err := executor.ValidateID("chat id", spec.ChatID); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if e.CreateErr != nil {
		return nil, e.CreateErr
	}
	key := spec.UserID + "/" + spec.ChatID
	release, err := e.lease(ctx, key, spec.LeaseWait)
	if err != nil {
		return nil, fmt.Errorf("create sandbox for chat %s: %w", key, err)
	}
	dir, err := executor.PrepareWorkspace(e.DataDir, spec.UserID, spec.ChatID, -1, -1)
	if err == nil {
		var ws *executor.Workspace
		ws, err = executor.OpenWorkspace(dir, executor.WorkspaceOptions{UID: -1, GID: -1})
		if err == nil {
			sb := newSandbox(ws, spec, release)
			if e.OnCreate != nil {
				e.OnCreate(sb)
			}
			e.mu.Lock()
			e.created = append(e.created, sb)
			e.mu.Unlock()
			return sb, nil
		}
	}
	release()
	return nil, fmt.Errorf("create sandbox for chat %s: %w", key, err)
}

// lease takes the chat's lease, waiting up to wait for the holder.
func (e *FakeExecutor) lease(ctx context.Context, key string, wait time.Duration) (func(), error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, fmt.Errorf("executor is closed: %w", executor.ErrNotRunning)
		}
		if e.leases == nil {
			e.leases = map[string]chan struct{}{}
		}
		held, busy := e.leases[key]
		if !busy {
			done := make(chan struct{})
			e.leases[key] = done
			e.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					e.mu.Lock()
					delete(e.leases, key)
					e.mu.Unlock()
					close(done)
				})
			}, nil
		}
		e.mu.Unlock()
		select {
		case <-held:
		case <-timer.C:
			return nil, fmt.Errorf("another request still holds the chat after %v; retry later or raise the lease wait: %w", wait, executor.ErrBusy)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the chat's lease: %w", ctx.Err())
		}
	}
}

// Close closes every sandbox still open; later Creates fail with
// ErrNotRunning.
func (e *FakeExecutor) Close() error {
	e.mu.Lock()
	e.closed = true
	sbs := slices.Clone(e.created)
	e.mu.Unlock()
	var errs []error
	for _, sb := range sbs {
		errs = append(errs, sb.Close(context.Background()))
	}
	return errors.Join(errs...)
}
