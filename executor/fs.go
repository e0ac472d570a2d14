package executor

import (
	"context"
	"time"
)

// FileInfo describes one workspace entry. Its JSON form is what hooks see
// from ctx.sandbox.ListDir.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
}

// FS is the host-side file API over a sandbox's workspace. Names are
// relative to the workspace root, or absolute under "/workspace/". It never
// goes through the container (no exec), and it never follows a symlink.
type FS interface {
	ReadFile(ctx context.Context, name string) ([]byte, error)
	WriteFile(ctx context.Context, name string, data []byte) error
	ListDir(ctx context.Context, name string) ([]FileInfo, error)
	Stat(ctx context.Context, name string) (FileInfo, error)
	EditFile(ctx context.Context, name string, edits []Edit) (EditResult, error)
}

// HostFS is the file API of a workspace that is a host directory
// (Workspace): FS and Restorer. A backend whose workspace is one embeds it
// in its Sandbox, set to the Workspace, instead of forwarding each method.
type HostFS interface {
	FS
	Restorer
}

var _ HostFS = (*Workspace)(nil)
