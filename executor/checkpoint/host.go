package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentbox/agentbox/executor"
)

// StoresDir holds the Stores of a data directory's workspaces, one per
// workspace, named as its workspace is (executor.WorkspaceLayout): the
// name carries no id. No sandbox mounts it.
const StoresDir = "checkpoints"

// Host is executor.Checkpointer for the backends whose workspaces are host
// directories of one data directory (executor/docker, executor/local):
// {data}/ws/{name} and its Store {data}/checkpoints/{name}. It is safe for
// concurrent use on different places; the caller holds a place's lease.
type Host struct {
	layout   *executor.WorkspaceLayout
	dataDir  string
	uid, gid int
	// Lock, when set, takes a place for the length of a take, a restore
	// or a fork (a backend's cross-process chat lock) and returns what
	// releases it.
	Lock func(ctx context.Context, user, chat string) (release func(), err error)
}

// locked runs fn with the place locked (Lock), after checking its ids.
func (h *Host) locked(ctx context.Context, user, chat string, fn func() error) error {
	if err := executor.ValidateID("user id", user); err != nil {
		return err
	}
	if err := executor.ValidateID("chat id", chat); err != nil {
		return err
	}
	if h.Lock == nil {
		return fn()
	}
	release, err := h.Lock(ctx, user, chat)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

// NewHost is the Checkpointer of layout's workspaces, under dataDir;
// what a restore makes belongs to the workspace's owner, or to uid:gid
// when it cannot be told.
func NewHost(dataDir string, layout *executor.WorkspaceLayout, uid, gid int) (*Host, error) {
	if err := os.MkdirAll(filepath.Join(dataDir, StoresDir), 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &Host{layout: layout, dataDir: dataDir, uid: uid, gid: gid}, nil
}

var _ executor.Checkpointer = (*Host)(nil)

// store opens the place's Store within b, and names its workspace.
func (h *Host) store(user, chat string, b executor.CheckpointBounds) (*Store, string, error) {
	if err := executor.ValidateID("user id", user); err != nil {
		return nil, "", err
	}
	if err := executor.ValidateID("chat id", chat); err != nil {
		return nil, "", err
	}
	name, ws := h.layout.Name(user, chat), h.layout.Dir(user, chat)
	uid, gid := h.uid, h.gid
	if fi, err := os.Lstat(ws); err == nil {
		// What a restore makes belongs to the workspace's owner: the
		// sandbox user its backend prepared it for.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	s, err := Open(filepath.Join(h.dataDir, StoresDir, name), Options{MaxCheckpoints: b.Count, MaxBytes: b.Bytes, UID: uid, GID: gid})
	if err != nil {
		return nil, "", err
	}
	return s, ws, nil
}

// stored reports whether the place has a Store: reading or restoring the
// checkpoints of a place that has none makes none, so that requests for
// invented chats leave nothing on the host (no workspace's retention
// would remove it).
func (h *Host) stored(user, chat string) (bool, error) {
	if err := errors.Join(executor.ValidateID("user id", user), executor.ValidateID("chat id", chat)); err != nil {
		return false, err
	}
	_, err := os.Lstat(filepath.Join(h.dataDir, StoresDir, h.layout.Name(user, chat)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// TakeCheckpoint implements executor.Checkpointer.
func (h *Host) TakeCheckpoint(ctx context.Context, user, chat, label string, b executor.CheckpointBounds) (info executor.CheckpointInfo, err error) {
	err = h.locked(ctx, user, chat, func() error {
		s, ws, err := h.store(user, chat, b)
		if err != nil {
			return err
		}
		m, err := s.Take(ctx, ws, label)
		if err != nil {
			return mapErr(err)
		}
		info = m.summary()
		return nil
	})
	return info, err
}

// RestoreCheckpoint implements executor.Checkpointer.
func (h *Host) RestoreCheckpoint(ctx context.Context, user, chat, id string) (res executor.RestoreInfo, err error) {
	err = h.locked(ctx, user, chat, func() error {
		if ok, err := h.stored(user, chat); !ok || err != nil {
			return cmp.Or(err, fmt.Errorf("%w: %q", executor.ErrNotFound, id))
		}
		s, ws, err := h.store(user, chat, executor.CheckpointBounds{})
		if err != nil {
			return err
		}
		res, err = s.Restore(ctx, ws, id)
		return mapErr(err)
	})
	return res, err
}

// Checkpoints implements executor.Checkpointer.
func (h *Host) Checkpoints(_ context.Context, user, chat string) ([]executor.CheckpointInfo, string, error) {
	if ok, err := h.stored(user, chat); !ok || err != nil {
		return nil, "", err
	}
	s, _, err := h.store(user, chat, executor.CheckpointBounds{})
	if err != nil {
		return nil, "", err
	}
	list, err := s.List()
	if err != nil {
		return nil, "", err
	}
	return list, s.head(), nil
}

// ForkCheckpoint implements executor.Checkpointer: the checkpoint is
// restored into the new place's workspace from the source's Store, then
// taken in the new place's own Store, so that the two never share a file.
func (h *Host) ForkCheckpoint(ctx context.Context, user, chat, id, toUser, toChat string, b executor.CheckpointBounds) (info executor.CheckpointInfo, err error) {
	err = h.locked(ctx, user, chat, func() error {
		return h.locked(ctx, toUser, toChat, func() error {
			info, err = h.fork(ctx, user, chat, id, toUser, toChat, b)
			return err
		})
	})
	return info, err
}

// fork is ForkCheckpoint with both places locked.
func (h *Host) fork(ctx context.Context, user, chat, id, toUser, toChat string, b executor.CheckpointBounds) (executor.CheckpointInfo, error) {
	if ok, err := h.stored(user, chat); !ok || err != nil {
		return executor.CheckpointInfo{}, cmp.Or(err, fmt.Errorf("%w: %q", executor.ErrNotFound, id))
	}
	from, _, err := h.store(user, chat, executor.CheckpointBounds{})
	if err != nil {
		return executor.CheckpointInfo{}, err
	}
	to, ws, err := h.store(toUser, toChat, b)
	if err != nil {
		return executor.CheckpointInfo{}, err
	}
	if list, err := to.List(); err != nil || len(list) > 0 {
		return executor.CheckpointInfo{}, fmt.Errorf("checkpoint: fork into %s/%s: it has checkpoints of its own; fork into a chat that has none: %w", toUser, toChat, executor.ErrInvalid)
	}
	if _, err := h.layout.Prepare(toUser, toChat, h.uid, h.gid); err != nil {
		return executor.CheckpointInfo{}, err
	}
	if entries, err := os.ReadDir(ws); err != nil || len(entries) > 0 {
		return executor.CheckpointInfo{}, fmt.Errorf("checkpoint: fork into %s/%s: its workspace is not empty; fork into a chat that has none: %w", toUser, toChat, executor.ErrInvalid)
	}
	if _, err := from.restoreInto(ctx, ws, id); err != nil {
		return executor.CheckpointInfo{}, mapErr(err)
	}
	m, err := to.Take(ctx, ws, executor.ForkLabelPrefix+id)
	if err != nil {
		return executor.CheckpointInfo{}, mapErr(err)
	}
	return m.summary(), nil
}

// RemoveCheckpoints deletes the Store of a place's workspace (retention).
func (h *Host) RemoveCheckpoints(user, chat string) error {
	return os.RemoveAll(filepath.Join(h.dataDir, StoresDir, h.layout.Name(user, chat)))
}

// mapErr gives the executor's sentinels to the Store's errors.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %w", executor.ErrNotFound, err)
	case errors.Is(err, ErrTooLarge):
		return fmt.Errorf("%w: %w", executor.ErrNoSpace, err)
	}
	return err
}
