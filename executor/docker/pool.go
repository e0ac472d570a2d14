package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// The pool (Options.Pool) keeps started containers for the first request
// of new chats, saving the container start (about 0.3 s on 2 cores) on
// that request. A pooled container is created before its chat is known, so
// its workspace mount is an empty directory, its slot, {data}/pool/
// {instance}/{sandbox}, bound with rslave propagation from the instance's
// pool dir, a small tmpfs that the executor mounts and makes shared (a
// filesystem of its own: the container's mountinfo shows no data dir path).
// Adoption bind-mounts the chat's workspace onto the slot on the host; the
// mount propagates into the running container at once. Docker labels are
// fixed at create, so the chat of an adopted container is recorded in
// {data}/pool-owners/{sandbox}, written before the bind and out of the
// agent's reach, and takeover reads it. Unmounting the slot on the host
// takes the workspace away from the container too, which every removal
// (Close, takeover, the reconciler) does through removeHostDir.
//
// The pool follows demand: closing or parking a sandbox refills the pool
// of its configuration (everything of the Spec but the chat and the
// assistant) up to Options.Pool containers; an unused container is removed
// after Options.PoolIdle, and none is started again until a sandbox of its
// configuration closes. A sandbox with a runtime other than runc (gVisor
// does not propagate host mounts) or without the helper is never pooled.

// Pool defaults and labels.
const (
	// DefaultPoolIdle is how long a pooled container waits unused.
	DefaultPoolIdle = executor.DefaultPoolIdle
	// LabelPool marks a container started for the pool; its value is the
	// hash of the configuration it was made for.
	LabelPool = labelPrefix + "pool"
	// PolicyPool is LabelPolicy of a pooled container.
	PolicyPool = "pool"

	poolDir       = "pool"
	poolOwnersDir = "pool-owners"
)

// pool is the executor's pool of started containers; nil when
// Options.Pool is 0 (its methods are then no-ops).
type pool struct {
	e    *Executor
	root string // {data}/pool/{instance}, a shared tmpfs
	*executor.Pool[plan, *poolEntry]
}

// poolEntry is one started container waiting for a chat. done ends its
// mark in the executor's registry, which keeps the reconciler off it.
type poolEntry struct {
	sb   *Sandbox
	slot string
	done func()
}

// owner is a pooled container's chat, recorded at adoption.
type owner struct {
	User string `json:"user"`
	Chat string `json:"chat"`
}

// openPool mounts a tmpfs on the instance's pool dir and makes it shared. It returns nil
// without Options.Pool.
func (e *Executor) openPool() (*pool, error) {
	if e.o.Pool == 0 {
		return nil, nil
	}
	if e.o.helperPath() == "" {
		return nil, fmt.Errorf("docker executor: Options.Pool needs the helper (Options.HelperBinary or UseImageHelper), which tells when a pooled container is ready: %w", executor.ErrInvalid)
	}
	for _, dir := range []string{poolDir, poolOwnersDir} {
		if err := e.root.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("docker executor: create %s: %w", dir, err)
		}
	}
	name := filepath.Join(poolDir, e.o.InstanceID)
	if err := e.root.Mkdir(name, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("docker executor: create the pool dir: %w", err)
	}
	root, err := filepath.EvalSymlinks(filepath.Join(e.o.DataDir, name))
	if err != nil {
		return nil, fmt.Errorf("docker executor: %w", err)
	}
	// A tmpfs of its own, so that containers see no data dir path in
	// their mountinfo (only /{sandbox} of this tmpfs).
	if err := syscall.Mount("tmpfs", root, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=1m,mode=0755"); err != nil {
		_ = e.root.Remove(name)
		return nil, fmt.Errorf("docker executor: Options.Pool needs the gateway to mount in the Docker daemon's mount namespace (root on the daemon's host): mount a tmpfs at %s: %w", root, err)
	}
	if err := syscall.Mount("", root, "", syscall.MS_SHARED, ""); err != nil {
		_ = syscall.Unmount(root, syscall.MNT_DETACH)
		_ = e.root.Remove(name)
		return nil, fmt.Errorf("docker executor: make the pool dir %s a shared mount: %w", root, err)
	}
	e.logger.Debug("container pool on", "size", e.o.Pool, "idle", e.o.PoolIdle, "dir", root)
	pl := &pool{e: e, root: root}
	pl.Pool = executor.NewPool(executor.PoolConfig[plan, *poolEntry]{
		Size: e.o.Pool, Idle: e.o.PoolIdle, Start: pl.start, Drop: pl.drop,
		Failed: func(err error, off bool) {
			if off {
				e.logger.Error("the container pool is off: its containers failed to start again and again; requests start their own (the Docker daemon must see the pool's mounts: run the gateway as root in the daemon's mount namespace)", "failures", executor.PoolMaxFailures, "error", err)
				return
			}
			e.logger.Warn("cannot start a pooled container", "error", err)
		},
	})
	return pl, nil
}

// sweepPools unmounts and removes the pool dirs of dead instances (a
// killed gateway's), with the slots left in them: their containers lose
// the workspace and the reconciler removes them. New runs it with or
// without Options.Pool.
func (e *Executor) sweepPools() {
	insts, err := dirNames(filepath.Join(e.o.DataDir, poolDir))
	if err != nil {
		return
	}
	for _, inst := range insts {
		if inst == e.o.InstanceID || e.instanceAlive(inst) {
			continue
		}
		dir := filepath.Join(e.o.DataDir, poolDir, inst)
		slots, _ := dirNames(dir)
		for _, id := range slots {
			e.releaseSlot(inst, id)
		}
		if err := unmountDir(dir); err != nil {
			e.logger.Warn("cannot unmount a dead instance's pool dir", "dir", dir, "error", err)
			continue
		}
		if err := e.root.Remove(filepath.Join(poolDir, inst)); err != nil {
			e.logger.Warn("cannot remove a dead instance's pool dir", "dir", dir, "error", err)
		}
	}
}

// unmountDir detaches whatever is mounted on dir; a dir that is not a
// mount point is not an error.
func unmountDir(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}

// releaseSlot undoes a pooled container's slot: the workspace bound on it
// (first, so the container loses the workspace), the slot dir (rmdir only:
// never a recursive removal, which would run into a workspace still bound
// there) and the owner record.
func (e *Executor) releaseSlot(inst, id string) {
	if executor.ValidateID("sandbox id", id) != nil || executor.ValidateID("instance id", inst) != nil {
		return
	}
	name := filepath.Join(poolDir, inst, id)
	if err := unmountDir(filepath.Join(e.o.DataDir, name)); err != nil {
		e.logger.Warn("cannot unmount a pool slot", "slot", name, "error", err)
		return
	}
	if err := e.root.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.logger.Warn("cannot remove a pool slot", "slot", name, "error", err)
	}
	if err := e.root.Remove(filepath.Join(poolOwnersDir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.logger.Warn("cannot remove a pool owner record", "sandbox", id, "error", err)
	}
}

// pooledOwner reads the chat recorded for pooled container c, if any.
func (e *Executor) pooledOwner(c container.Summary) (owner, bool) {
	id := c.Labels[LabelSandbox]
	if c.Labels[LabelPool] == "" || executor.ValidateID("sandbox id", id) != nil {
		return owner{}, false
	}
	b, err := e.root.ReadFile(filepath.Join(poolOwnersDir, id))
	if err != nil {
		return owner{}, false
	}
	var o owner
	if json.Unmarshal(b, &o) != nil {
		return owner{}, false
	}
	return o, true
}

// poolKey is executor.PoolKey of p; ok is false for a p that is never
// pooled (a runtime other than runc).
func poolKey(p plan) (key string, ok bool) {
	if p.spec.Runtime != "" && p.spec.Runtime != "runc" {
		return "", false
	}
	return executor.PoolKey(p.image, p.spec), true
}

// take returns a ready container for p's configuration, or nil.
func (pl *pool) take(p plan) *poolEntry {
	if pl == nil {
		return nil
	}
	key, ok := poolKey(p)
	if !ok {
		return nil
	}
	ent, _ := pl.Take(key)
	return ent
}

// adopt binds the chat's workspace (wsDir) into ent's container and
// returns it as the chat's sandbox; the caller sets its workspace handle
// and quota. On error ent is removed.
func (pl *pool) adopt(ctx context.Context, ent *poolEntry, p plan, wsDir string, logger hclog.Logger) (_ *Sandbox, err error) {
	sb := ent.sb
	defer func() {
		if err != nil {
			pl.drop(ent, err.Error())
		}
	}()
	if err := sb.running(ctx); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(owner{User: p.spec.UserID, Chat: p.spec.ChatID})
	if err := pl.e.root.WriteFile(filepath.Join(poolOwnersDir, sb.sandboxID), b, 0o600); err != nil {
		return nil, fmt.Errorf("record the pooled container's chat: %w", err)
	}
	if err := syscall.Mount(wsDir, ent.slot, "", syscall.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind the workspace into the pooled container: %w", err)
	}
	p.created, p.deadline = sb.plan.created, sb.plan.deadline
	sb.plan = p
	sb.logger = logger.With("sandbox", sb.sandboxID)
	sb.docker.logger = sb.logger
	sb.begun = ent.done
	sb.logger.Debug("pooled container adopted", "container", shortID(sb.id), "age", time.Since(p.created))
	return sb, nil
}

// refill starts containers for p's configuration in the background until
// the pool holds Options.Pool of them.
func (pl *pool) refill(p plan) {
	if pl == nil {
		return
	}
	if key, ok := poolKey(p); ok {
		pl.Refill(key, p)
	}
}

// start creates and starts a container for key with an empty slot as its
// workspace. Its own deadline (the helper's and the label's) is PoolIdle
// plus the configuration's Timeout away.
func (pl *pool) start(p plan, key string) (_ *poolEntry, err error) {
	e := pl.e
	id := randomID()
	done, err := e.sandboxes.Begin(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*e.o.CallTimeout)
	defer cancel()
	p.spec.UserID, p.spec.ChatID, p.spec.AssistantID, p.spec.ConfigHash = "", "", "", ""
	p.created = time.Now()
	p.deadline = p.created.Add(e.o.PoolIdle + p.spec.Timeout)
	slot := filepath.Join(pl.root, id)
	if err := os.Mkdir(slot, 0o755); err != nil {
		done()
		return nil, fmt.Errorf("create a pool slot: %w", err)
	}
	hostDir, err := e.makeHostDir(id, p.uid, p.gid)
	if err != nil {
		e.releaseSlot(e.o.InstanceID, id)
		done()
		return nil, err
	}
	sb := &Sandbox{e: e, sandboxID: id, hostDir: hostDir, plan: p, logger: e.logger.With("sandbox", id, "pool", key)}
	cfg, hc := e.containerConfig(p, id, slot, hostDir)
	cfg.Labels[LabelPool], cfg.Labels[LabelPolicy] = key, PolicyPool
	delete(cfg.Labels, LabelIdleTTL)
	hc.Mounts[0].BindOptions.Propagation = mount.PropagationRSlave
	if err := e.run(ctx, sb, cfg, hc); err != nil {
		err = errors.Join(err, e.discard(ctx, sb))
		done()
		return nil, fmt.Errorf("pooled container: %w", err)
	}
	sb.logger.Debug("pooled container ready", "container", shortID(sb.id), "took", time.Since(p.created))
	return &poolEntry{sb: sb, slot: slot, done: done}, nil
}

// drop removes ent's container and slot.
func (pl *pool) drop(ent *poolEntry, why string) {
	if err := pl.e.discard(context.Background(), ent.sb); err != nil {
		pl.e.logger.Warn("cannot remove a pooled container", "sandbox", ent.sb.sandboxID, "error", err)
	}
	ent.done()
	pl.e.logger.Debug("pooled container removed", "sandbox", ent.sb.sandboxID, "reason", why)
}

// close removes every pooled container, waits for the fills under way and
// unmounts the pool dir.
func (pl *pool) close() error {
	if pl == nil {
		return nil
	}
	pl.Close()
	if err := unmountDir(pl.root); err != nil {
		return fmt.Errorf("unmount the pool dir: %w", err)
	}
	if err := os.Remove(pl.root); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the pool dir: %w", err)
	}
	return nil
}

// size reports how many containers are ready, all keys together (tests).
func (pl *pool) size() int {
	if pl == nil {
		return 0
	}
	return pl.Size()
}
