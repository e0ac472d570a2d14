package executor

import (
	"context"
	"time"
)

// Checkpointer keeps checkpoints of the places' workspaces
// (Capabilities.Checkpoints), where no sandbox reaches them: a workspace's
// content at the end of each turn, put back when a chat's history returns
// to an earlier turn, and the start of a fork. A place is a user's chat or
// a client sandbox (its chat key). The caller holds the place's lease, and
// no agent process runs in the workspace while it restores. Errors wrap
// ErrNotFound for an unknown checkpoint, ErrNoSpace for a checkpoint past
// its bounds, ErrInvalid for bad ids.
type Checkpointer interface {
	// TakeCheckpoint checkpoints the place's workspace, labelled label,
	// within b (the oldest checkpoints go first).
	TakeCheckpoint(ctx context.Context, user, chat, label string, b CheckpointBounds) (CheckpointInfo, error)
	// RestoreCheckpoint makes the place's workspace checkpoint id's.
	RestoreCheckpoint(ctx context.Context, user, chat, id string) (RestoreInfo, error)
	// Checkpoints lists the place's checkpoints, oldest first, and the
	// one the workspace was last taken as or restored to ("" for none).
	Checkpoints(ctx context.Context, user, chat string) (list []CheckpointInfo, head string, err error)
	// ForkCheckpoint makes the workspace of the place (toUser, toChat),
	// which must hold nothing yet, checkpoint id of (user, chat), and
	// takes it as that place's first checkpoint, within b.
	ForkCheckpoint(ctx context.Context, user, chat, id, toUser, toChat string, b CheckpointBounds) (CheckpointInfo, error)
}

// CheckpointBounds bound one place's checkpoints: their count and the
// disk they take (0: the defaults, DefaultCheckpoints and
// DefaultCheckpointBytes).
type CheckpointBounds struct {
	Count int
	Bytes int64
}

// Defaults of CheckpointBounds.
const (
	DefaultCheckpoints           = 50
	DefaultCheckpointBytes int64 = 2 << 30
)

// CheckpointInfo describes one checkpoint.
type CheckpointInfo struct {
	ID      string    `json:"id"`
	Parent  string    `json:"parent,omitempty"`
	Label   string    `json:"label,omitempty"`
	Created time.Time `json:"created"`
	// Files and Bytes are what it holds; Changed the paths added, changed
	// or removed since its parent; NewBytes what it added to the store;
	// Skipped the FIFOs, devices and sockets it could not keep.
	Files    int   `json:"files"`
	Bytes    int64 `json:"bytes"`
	Changed  int   `json:"changed"`
	NewBytes int64 `json:"new_bytes"`
	Skipped  int   `json:"skipped,omitempty"`
}

// RestoreInfo is what a restore changed in a workspace.
type RestoreInfo struct {
	Written, Removed int
	Bytes            int64
}
