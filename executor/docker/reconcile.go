package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// reconciler removes managed containers that no live lease holds and whose
// owner instance is gone or whose deadline passed. A container of this
// instance that no lease holds is an orphan too (its Close failed). Its
// collaborators are function fields so that tests drive it without
// Docker; dryRun only logs.
type reconciler struct {
	logger  hclog.Logger
	dryRun  bool
	self    string
	dataDir string

	list          func(ctx context.Context) ([]container.Summary, error)
	remove        func(ctx context.Context, id string) error
	held          func(sandboxID string) bool
	instanceAlive func(instance string) bool
	removeHostDir func(sandboxID string) error
	pooledOwner   func(c container.Summary) (owner, bool)
	now           func() time.Time
}

func (e *Executor) newReconciler() *reconciler {
	return &reconciler{
		logger:  e.logger.Named("reconcile"),
		dryRun:  e.o.DryRun,
		self:    e.o.InstanceID,
		dataDir: e.o.DataDir,
		list: func(ctx context.Context) ([]container.Summary, error) {
			ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
			defer cancel()
			return e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
				filters.Arg("label", LabelManagedBy+"="+ManagedByValue),
				filters.Arg("label", LabelDataDir+"="+e.o.DataDir),
			)})
		},
		remove: func(ctx context.Context, id string) error {
			ctx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
			defer cancel()
			return removeErrors(e.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}))
		},
		held:          e.holds,
		instanceAlive: e.instanceAlive,
		removeHostDir: e.removeHostDir,
		pooledOwner:   e.pooledOwner,
		now:           time.Now,
	}
}

// reconcile removes the orphans it finds and returns their container ids.
func (r *reconciler) reconcile(ctx context.Context) ([]string, error) {
	list, err := r.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list managed containers: %w", err)
	}
	var removed []string
	var errs []error
	alive := map[string]bool{}
	for _, c := range list {
		labels := c.Labels
		if labels[LabelManagedBy] != ManagedByValue || labels[LabelDataDir] != r.dataDir {
			continue
		}
		sbID := labels[LabelSandbox]
		if r.held(sbID) {
			continue
		}
		inst := labels[LabelInstance]
		ok, seen := alive[inst]
		if !seen {
			ok = inst == r.self || r.instanceAlive(inst)
			alive[inst] = ok
		}
		deadline, derr := time.Parse(time.RFC3339Nano, labels[LabelDeadline])
		var why string
		switch {
		case inst == r.self:
			why = "this instance holds no lease on it"
		case !ok:
			why = "its owner instance is gone"
		case derr != nil:
			why = "it has no valid deadline label"
		case r.now().After(deadline):
			why = "its deadline passed"
		default:
			continue
		}
		user, chat := labels[LabelUser], labels[LabelChat]
		if r.pooledOwner != nil {
			if o, ok := r.pooledOwner(c); ok {
				user, chat = o.User, o.Chat // adopted from a pool: no chat label
			}
		}
		log := r.logger.With("container", shortID(c.ID), "sandbox", sbID, "instance", inst, "user", user, "chat", chat, "reason", why)
		if r.dryRun {
			log.Info("would remove orphaned container (dry run)")
			continue
		}
		if err := r.remove(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", shortID(c.ID), err))
			log.Warn("cannot remove orphaned container", "error", err)
			continue
		}
		if err := r.removeHostDir(sbID); err != nil {
			errs = append(errs, err)
		}
		log.Info("removed orphaned container")
		removed = append(removed, c.ID)
	}
	return removed, errors.Join(errs...)
}

// instanceAlive reports whether instance holds its lock file: a lock we
// can take belongs to a dead instance, whose file is then deleted.
func (e *Executor) instanceAlive(instance string) bool {
	if executor.ValidateID("instance id", instance) != nil {
		return false
	}
	name := instanceLockName(instance)
	f, err := e.root.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	defer func() { _ = f.Close() }()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true
	}
	if err != nil {
		return true // unsure: keep its containers until their deadline
	}
	if !e.o.DryRun {
		_ = e.root.Remove(name)
	}
	return false
}
