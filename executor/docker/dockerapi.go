package docker

import (
	"context"
	"errors"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// containerAPI lists the container calls the lifecycle and the reconciler
// make; *client.Client implements it.
type containerAPI interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerKill(ctx context.Context, containerID, signal string) error
	// ContainerPause and ContainerUnpause freeze a sandbox while the quota
	// watchdog measures its workspace.
	ContainerPause(ctx context.Context, containerID string) error
	ContainerUnpause(ctx context.Context, containerID string) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
}

// execAPI lists the calls of the docker-exec path.
type execAPI interface {
	ContainerExecCreate(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
}

// dockerAPI is everything the package calls.
type dockerAPI interface {
	containerAPI
	execAPI
	// ImageInspect identifies an image's content (environment snapshots).
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	Close() error
}

// ignorableRemoveError reports whether a removal error means the container
// is gone or going anyway: not found, or removal already in progress (the
// daemon's AutoRemove got there first). Every other error is real.
func ignorableRemoveError(err error) bool {
	if err == nil || cerrdefs.IsNotFound(err) {
		return true
	}
	if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		return true
	}
	return strings.Contains(err.Error(), "is already in progress") || strings.Contains(err.Error(), "No such container")
}

// removeErrors keeps the errors that matter and joins them.
func removeErrors(errs ...error) error {
	var keep []error
	for _, err := range errs {
		if !ignorableRemoveError(err) {
			keep = append(keep, err)
		}
	}
	return errors.Join(keep...)
}
