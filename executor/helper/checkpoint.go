package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/checkpoint"
)

// CheckpointRequest is one operation on a chat's checkpoint Store, run by
// `agentbox-helper checkpoint run` where the Store and the workspace are
// mounted (a Kubernetes backend's checkpoint pod, which the agent's pod
// does not share): the JSON on its stdin.
type CheckpointRequest struct {
	// Op is take, restore, list or fork.
	Op string `json:"op"`
	// Store and Workspace are the place's Store and workspace
	// directories; for fork, ToStore and ToWorkspace are the new place's.
	Store       string `json:"store"`
	Workspace   string `json:"workspace,omitempty"`
	ToStore     string `json:"to_store,omitempty"`
	ToWorkspace string `json:"to_workspace,omitempty"`
	// Label (take) and ID (restore, fork) name the checkpoint.
	Label string `json:"label,omitempty"`
	ID    string `json:"id,omitempty"`
	// Bounds bound the Store that takes a checkpoint (take, fork).
	Bounds executor.CheckpointBounds `json:"bounds"`
	// UID and GID own what a restore makes.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Pending are checkpoints of Store's place named without a pod (a
	// new chat's start, its workspace empty): the Store records them
	// (checkpoint.Store.Record) before the operation.
	Pending []executor.CheckpointInfo `json:"pending,omitempty"`
}

// CheckpointResponse is the operation's result, the JSON on its stdout.
type CheckpointResponse struct {
	Info    executor.CheckpointInfo `json:"info"`
	Restore executor.RestoreInfo    `json:"restore"`
	// List and Head are the place's checkpoints and head after the
	// operation (for fork: the new place's), so that the caller can keep
	// them where reading them needs no pod.
	List []executor.CheckpointInfo `json:"list,omitempty"`
	Head string                    `json:"head,omitempty"`
	// Error is why it failed; Kind names its executor sentinel
	// (not_found, no_space, invalid) or is "".
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// Kinds of CheckpointResponse errors, and the executor sentinels they stand for.
var checkpointKinds = map[string]error{
	"not_found": executor.ErrNotFound,
	"no_space":  executor.ErrNoSpace,
	"invalid":   executor.ErrInvalid,
}

// Err is the response's error with its executor sentinel, or nil.
func (r CheckpointResponse) Err() error {
	if r.Error == "" {
		return nil
	}
	if s, ok := checkpointKinds[r.Kind]; ok {
		return fmt.Errorf("%s: %w", r.Error, s)
	}
	return errors.New(r.Error)
}

// RunCheckpoint reads a CheckpointRequest from r, runs it with package
// checkpoint's Store and writes its CheckpointResponse to w; an
// operation's failure is in the response, the error only says the
// response could not be written.
func RunCheckpoint(ctx context.Context, r io.Reader, w io.Writer) error {
	var req CheckpointRequest
	var resp CheckpointResponse
	err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&req)
	if err != nil {
		err = fmt.Errorf("checkpoint: read the request: %w: %w", err, executor.ErrInvalid)
	} else {
		resp, err = runCheckpoint(ctx, req)
	}
	if err != nil {
		resp = CheckpointResponse{Error: err.Error()}
		for k, s := range checkpointKinds {
			if errors.Is(err, s) {
				resp.Kind = k
			}
		}
	}
	return json.NewEncoder(w).Encode(resp)
}

// runCheckpoint runs one request.
func runCheckpoint(ctx context.Context, req CheckpointRequest) (CheckpointResponse, error) {
	var resp CheckpointResponse
	open := func(dir string, b executor.CheckpointBounds) (*checkpoint.Store, error) {
		if dir == "" {
			return nil, fmt.Errorf("checkpoint: the request names no store: %w", executor.ErrInvalid)
		}
		return checkpoint.Open(dir, checkpoint.Options{MaxCheckpoints: b.Count, MaxBytes: b.Bytes, UID: req.UID, GID: req.GID})
	}
	s, err := open(req.Store, req.Bounds)
	if err != nil {
		return resp, err
	}
	for _, p := range req.Pending {
		if err := s.Record(p.ID, p.Label, p.Created); err != nil {
			return resp, err
		}
	}
	switch req.Op {
	case "take":
		m, err := s.Take(ctx, req.Workspace, req.Label)
		if err != nil {
			return resp, checkpoint.MapError(err)
		}
		resp.Info = m.Summary()
	case "restore":
		resp.Restore, err = s.Restore(ctx, req.Workspace, req.ID)
		if err != nil {
			return resp, checkpoint.MapError(err)
		}
	case "list":
	case "fork":
		// As checkpoint.Host's fork: restored from the source's Store into
		// the new place's empty workspace, then taken in its own Store.
		to, err := open(req.ToStore, req.Bounds)
		if err != nil {
			return resp, err
		}
		if list, err := to.List(); err != nil || len(list) > 0 {
			return resp, fmt.Errorf("checkpoint: fork: the new place has checkpoints of its own: %w", executor.ErrInvalid)
		}
		if entries, err := os.ReadDir(req.ToWorkspace); err != nil || len(entries) > 0 {
			return resp, fmt.Errorf("checkpoint: fork: the new place's workspace is not empty: %w", executor.ErrInvalid)
		}
		if _, err := s.RestoreInto(ctx, req.ToWorkspace, req.ID); err != nil {
			return resp, checkpoint.MapError(err)
		}
		m, err := to.Take(ctx, req.ToWorkspace, "fork:"+req.ID)
		if err != nil {
			return resp, checkpoint.MapError(err)
		}
		resp.Info = m.Summary()
		s = to
	default:
		return resp, fmt.Errorf("checkpoint: unknown op %q; use take, restore, list or fork: %w", req.Op, executor.ErrInvalid)
	}
	if resp.List, err = s.List(); err != nil {
		return resp, err
	}
	resp.Head = s.Head()
	return resp, nil
}
