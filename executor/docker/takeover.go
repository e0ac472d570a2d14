package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// takeoverPoll is how often takeOver looks whether the containers it
// removed are gone.
const takeoverPoll = 50 * time.Millisecond

// chatContainers lists the managed containers of one chat on this data
// directory, in any state: those labelled with the chat and the pooled
// ones whose owner record names it.
func (e *Executor) chatContainers(ctx context.Context, user, chat string) ([]container.Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	all, err := e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManagedBy+"="+ManagedByValue),
		filters.Arg("label", LabelDataDir+"="+e.o.DataDir),
	)})
	if err != nil {
		return nil, err
	}
	var list []container.Summary
	for _, c := range all {
		if c.Labels[LabelUser] == user && c.Labels[LabelChat] == chat {
			list = append(list, c)
		} else if o, ok := e.pooledOwner(c); ok && o.User == user && o.Chat == chat {
			list = append(list, c)
		}
	}
	return list, nil
}

// takeOver makes sure no container is left on the chat's workspace before
// a new one starts on it. The caller holds the chat's lease and its flock,
// so no live request uses any container of the chat: one that exists was
// left by a gateway killed mid-run (kill -9, OOM, power loss: its flock
// died with it) or by a Close whose removal failed. Each is removed (force:
// the agent in it may still be writing to the workspace) and takeOver
// returns only once the daemon no longer lists any, bounded by CallTimeout
// per step. It does not wait for the reconciler, which looks only every
// ReconcileInterval.
func (e *Executor) takeOver(ctx context.Context, user, chat string, logger hclog.Logger) error {
	list, err := e.chatContainers(ctx, user, chat)
	if err != nil {
		return e.unavailable(ctx, "list the chat's containers", err)
	}
	if len(list) == 0 {
		return nil
	}
	start := time.Now()
	alive := map[string]bool{}
	var errs []error
	removed := 0
	for _, c := range list {
		inst, sbID := c.Labels[LabelInstance], c.Labels[LabelSandbox]
		if e.holds(sbID) {
			if e.closeParked(ctx, sbID) {
				// Our own idle session container: the chat is ours now.
				removed++
				continue
			}
			// Cannot happen while we hold the chat's lease; never remove
			// a live sandbox of ours.
			return fmt.Errorf("sandbox %s of this gateway is still open on the chat: %w", sbID, executor.ErrBusy)
		}
		ok, seen := alive[inst]
		if !seen {
			ok = inst != e.o.InstanceID && e.instanceAlive(inst)
			alive[inst] = ok
		}
		var why string
		switch {
		case inst == e.o.InstanceID:
			why = "this gateway could not remove it when its sandbox closed"
		case !ok:
			why = "its gateway is gone (killed or crashed mid-run)"
		default:
			why = "its gateway released the chat without removing it"
		}
		log := logger.With("container", shortID(c.ID), "sandbox", sbID, "owner", inst, "state", c.State, "reason", why)
		callCtx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
		err := removeErrors(e.api.ContainerRemove(callCtx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}))
		cancel()
		if err != nil {
			log.Warn("cannot remove a container left on the chat's workspace", "error", err)
			errs = append(errs, e.unavailable(ctx, "remove container "+shortID(c.ID), err))
			continue
		}
		if err := e.removeHostDir(sbID); err != nil {
			log.Warn("cannot remove a left sandbox's host dir", "error", err)
		}
		removed++
		log.Info("removed a container left on the chat's workspace before starting a new one")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("a container left on this chat's workspace could not be removed; retry, and if it persists remove it with `docker rm -f`: %w", err)
	}
	// ContainerRemove returns before the container is gone when the
	// daemon's AutoRemove was already at it ("removal in progress").
	deadline := time.Now().Add(e.o.CallTimeout)
	for {
		list, err := e.chatContainers(ctx, user, chat)
		if err != nil {
			return e.unavailable(ctx, "list the chat's containers", err)
		}
		if len(list) == 0 {
			logger.Debug("chat taken over", "removed", removed, "duration", time.Since(start))
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("container %s left on this chat's workspace is still there %v after its removal (state %q); retry later: %w", shortID(list[0].ID), e.o.CallTimeout, list[0].State, executor.ErrBusy)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a left container's removal: %w", ctx.Err())
		case <-time.After(takeoverPoll):
		}
	}
}
