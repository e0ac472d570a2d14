package docker

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/executor"
)

// stuckExecAPI is a daemon whose first exec never ends, where no further
// exec can start (a fork bomb at the pids limit), and which has deleted
// the exec by the time it is inspected (the container was killed and
// removed by AutoRemove).
type stuckExecAPI struct {
	creates atomic.Int32
	conns   []net.Conn
}

func (f *stuckExecAPI) ContainerExecCreate(context.Context, string, container.ExecOptions) (container.ExecCreateResponse, error) {
	if f.creates.Add(1) > 1 {
		return container.ExecCreateResponse{}, errors.New("OCI runtime exec failed: fork/exec: resource temporarily unavailable")
	}
	return container.ExecCreateResponse{ID: "e1"}, nil
}

func (f *stuckExecAPI) ContainerExecAttach(context.Context, string, container.ExecAttachOptions) (types.HijackedResponse, error) {
	a, b := net.Pipe()
	f.conns = append(f.conns, b)
	return types.NewHijackedResponse(a, ""), nil
}

func (f *stuckExecAPI) ContainerExecInspect(context.Context, string) (container.ExecInspect, error) {
	return container.ExecInspect{}, cerrdefs.ErrNotFound.WithMessage("No such exec instance: e1")
}

// TestStoppedExecKeepsItsReason: an exec stopped at its timeout whose
// stop took the container with it (the status is gone) still fails with
// ErrTimeout, and the container was stopped.
func TestStoppedExecKeepsItsReason(t *testing.T) {
	api := &stuckExecAPI{}
	var stuck atomic.Bool
	d := &dockerExec{api: api, containerID: "c1", stopGrace: 100 * time.Millisecond, callTimeout: time.Second, logger: hclog.NewNullLogger(),
		stuck: func(context.Context, string) { stuck.Store(true) }}
	_, err := d.run(context.Background(), &executor.Cmd{Args: []string{"bomb"}, Timeout: 100 * time.Millisecond, MaxOutput: 1 << 20})
	for _, c := range api.conns {
		_ = c.Close()
	}
	assert.ErrorIs(t, err, executor.ErrTimeout)
	assert.True(t, stuck.Load(), "the container was stopped when the kill script could not start")
}

// takeoverAPI lists one left container until it has been removed and
// listed polls more times, as a daemon whose AutoRemove was already
// removing it ("removal in progress") does; listErr makes the daemon
// unreachable.
type takeoverAPI struct {
	fakeDocker
	listErr   error
	lingering int // lists that still show the container after its removal
	gone      bool
}

func (f *takeoverAPI) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	if len(f.removed) > 0 {
		if f.lingering == 0 {
			f.gone = true
			return nil, nil
		}
		f.lingering--
	}
	return []container.Summary{{ID: "old1", State: "running", Labels: map[string]string{
		LabelManagedBy: ManagedByValue, LabelInstance: "deadgateway", LabelSandbox: "sbold", LabelUser: "u1", LabelChat: "c1",
	}}}, nil
}

// TestTakeOverWaitsUntilGone: a left container whose removal is already in
// progress is waited for until the daemon no longer lists it; a daemon
// that does not answer fails the takeover with ErrUnavailable.
func TestTakeOverWaitsUntilGone(t *testing.T) {
	newE := func(t *testing.T, api dockerAPI) *Executor {
		o, err := Options{DataDir: t.TempDir(), ReconcileInterval: -1, RetentionInterval: -1, CallTimeout: 10 * time.Second}.withDefaults()
		assert.NoError(t, err)
		e, err := newExecutor(context.Background(), o, api)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	t.Run("removal in progress", func(t *testing.T) {
		api := &takeoverAPI{lingering: 3}
		api.removeErr = errors.Join(cerrdefs.ErrConflict, errors.New("removal of container old1 is already in progress"))
		e := newE(t, api)
		assert.NoError(t, e.takeOver(context.Background(), "u1", "c1", hclog.NewNullLogger()))
		assert.Equal(t, []string{"old1"}, api.removed)
		assert.True(t, api.gone, "takeOver returned only once the container was no longer listed")
	})
	t.Run("daemon unreachable", func(t *testing.T) {
		api := &takeoverAPI{}
		e := newE(t, api)
		api.listErr = errConnFailed()
		err := e.takeOver(context.Background(), "u1", "c1", hclog.NewNullLogger())
		assert.ErrorIs(t, err, executor.ErrUnavailable)
		assert.Contains(t, err.Error(), "start dockerd")
		assert.Empty(t, api.removed)
	})
}

// errConnFailed is the Docker client's error for a daemon it cannot reach.
// The constructor is deprecated, and it is the only way to build the
// client's own error type, which client.IsErrConnectionFailed checks for.
func errConnFailed() error {
	return client.ErrorConnectionFailed("unix:///nowhere.sock") //nolint:staticcheck // see above
}
