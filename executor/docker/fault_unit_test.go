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
