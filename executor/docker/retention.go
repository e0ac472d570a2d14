package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor/checkpoint"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// retention removes workspaces nobody used for keep, with their lock
// files. Last use is the mtime of the chat's lock file (touched at each
// lease release), or of the workspace directory when there is no lock file. It never touches a
// leased chat (in this process or, through the flock, in another) and never
// follows a symlink: it walks with os.Root and Lstat and removes with
// Root.RemoveAll.
type retention struct {
	logger hclog.Logger
	dryRun bool
	keep   time.Duration
	root   *os.Root // DataDir
	layout *executor.WorkspaceLayout
	now    func() time.Time
	// tryLease takes the chat's in-process lease without waiting.
	tryLease func(user, chat string) (func(), bool)
	// dropQuota unmounts and removes the chat's quota image, if any.
	dropQuota func(user, chat string) error
}

func (e *Executor) newRetention() *retention {
	return &retention{
		logger:    e.logger.Named("retention"),
		dryRun:    e.o.DryRun,
		keep:      e.o.Retention,
		root:      e.root,
		layout:    e.layout,
		now:       time.Now,
		dropQuota: e.quota.drop,
		tryLease: func(user, chat string) (func(), bool) {
			release, err := e.leases.Acquire(context.Background(), user+"/"+chat, 0)
			if err == nil && e.parkedOn(user, chat) {
				// A parked session container still has the workspace.
				release()
				return nil, false
			}
			return release, err == nil
		},
	}
}

// chatRef is one chat, by its ids.
type chatRef struct{ user, chat string }

// listChats lists the chats that have a lock file, {locksDir}/{user}/{chat}.lock:
// every chat a Create ever leased (it takes the lock before it makes the
// workspace), which is how the sweep finds workspaces whose names carry
// no ids.
func listChats(root *os.Root) ([]chatRef, error) {
	users, err := executor.ReadDirNoFollow(root, locksDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []chatRef
	var errs []error
	for _, u := range users {
		if !u.IsDir() || executor.ValidateID("user id", u.Name()) != nil {
			continue
		}
		locks, err := executor.ReadDirNoFollow(root, filepath.Join(locksDir, u.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range locks {
			chat, ok := strings.CutSuffix(l.Name(), ".lock")
			if ok && l.Type().IsRegular() && executor.ValidateID("chat id", chat) == nil {
				out = append(out, chatRef{u.Name(), chat})
			}
		}
	}
	return out, errors.Join(errs...)
}

// legacyChats lists the chats still in the legacy layout,
// workspaces/{user}/chat-{chat}, removing the legacy lock files found
// beside them.
func (r *retention) legacyChats() ([]chatRef, error) {
	users, err := executor.ReadDirNoFollow(r.root, executor.LegacyWorkspacesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []chatRef
	var errs []error
	for _, u := range users {
		if !u.IsDir() || executor.ValidateID("user id", u.Name()) != nil {
			continue
		}
		chats, err := executor.ReadDirNoFollow(r.root, filepath.Join(executor.LegacyWorkspacesDir, u.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, c := range chats {
			chat, ok := strings.CutPrefix(c.Name(), "chat-")
			if !ok || executor.ValidateID("chat id", chat) != nil {
				continue
			}
			if !c.IsDir() {
				if legacy, ok := strings.CutSuffix(chat, ".lock"); ok && c.Type().IsRegular() {
					r.removeLegacyLock(u.Name(), legacy)
				}
				continue
			}
			out = append(out, chatRef{u.Name(), chat})
		}
	}
	return out, errors.Join(errs...)
}

// sweep removes expired workspaces and returns their paths relative to
// DataDir. It finds chats by their lock files and by the legacy layout.
func (r *retention) sweep(ctx context.Context) ([]string, error) {
	// Legacy chats first: a chat whose workspace Prepare moves meanwhile
	// has its lock file by then.
	legacy, lerr := r.legacyChats()
	chats, err := listChats(r.root)
	errs := []error{lerr, err}
	seen := map[chatRef]bool{}
	cutoff := r.now().Add(-r.keep)
	var removed []string
	for _, c := range append(chats, legacy...) {
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		if seen[c] {
			continue
		}
		seen[c] = true
		name, err := r.expire(c.user, c.chat, cutoff)
		if err != nil {
			errs = append(errs, err)
		}
		if name != "" {
			removed = append(removed, name)
		}
	}
	return removed, errors.Join(errs...)
}

// expire removes one chat's workspace (at its neutral name and at its
// legacy path) when it is unused since cutoff and nobody holds it, and
// returns the path it removed relative to DataDir.
func (r *retention) expire(user, chat string, cutoff time.Time) (string, error) {
	dir := r.layout.Rel(user, chat)
	legacyDir := executor.LegacyRel(user, chat)
	if _, err := r.root.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if _, err := r.root.Lstat(legacyDir); err == nil {
			dir = legacyDir
		}
	}
	last, err := r.lastUse(user, chat)
	if err != nil || !last.Before(cutoff) {
		return "", err
	}
	release, ok := r.tryLease(user, chat)
	if !ok {
		return "", nil
	}
	defer release()
	lockName := chatLockName(user, chat)
	if err := r.root.MkdirAll(filepath.Dir(lockName), 0o700); err != nil {
		return "", fmt.Errorf("retention: %w", err)
	}
	_, statErr := r.root.Lstat(lockName)
	f, err := r.root.OpenFile(lockName, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("retention: %w", err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		// A lock file made just now carries the workspace's last use.
		_ = r.root.Chtimes(lockName, last, last)
	}
	lock, err := lockFile(context.Background(), f, 0)
	if err != nil {
		_ = f.Close()
		return "", nil // another gateway is using it
	}
	defer func() { _ = lock.Close() }()
	if !sameFile(f, r.root, lockName) {
		return "", nil // another gateway's sweep removed it meanwhile
	}
	// Checked again under the lock: a release may have just touched it.
	if last, err := r.lastUse(user, chat); err != nil || !last.Before(cutoff) {
		return "", err
	}
	log := r.logger.With("user", user, "chat", chat)
	if r.dryRun {
		log.Info("would remove unused workspace (dry run)")
		return "", nil
	}
	if err := r.dropQuotaOf(user, chat); err != nil {
		log.Warn("cannot remove the workspace's quota image", "error", err)
		return "", fmt.Errorf("retention: %s: %w", dir, err)
	}
	for _, d := range []string{r.layout.Rel(user, chat), legacyDir} {
		if err := r.root.RemoveAll(d); err != nil {
			log.Warn("cannot remove unused workspace", "error", err)
			return "", fmt.Errorf("retention: remove %s: %w", d, err)
		}
	}
	_ = r.root.Remove(filepath.Join(executor.LegacyWorkspacesDir, user))
	// The workspace's checkpoints go with it.
	if err := r.root.RemoveAll(filepath.Join(checkpoint.StoresDir, r.layout.Name(user, chat))); err != nil {
		log.Warn("cannot remove the workspace's checkpoints", "error", err)
	}
	// The lock goes last, still flocked: a waiter that opened it finds it
	// is no longer the file at the path and makes a new one.
	if err := r.root.Remove(lockName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("cannot remove the chat's lock file", "error", err)
	}
	log.Info("removed unused workspace", "retention", r.keep)
	return dir, nil
}

// removeLegacyLock removes a lock file that a version before the locks
// directory left next to the workspaces, unless a gateway of that version
// still holds it.
func (r *retention) removeLegacyLock(user, chat string) {
	name := legacyChatLockName(user, chat)
	f, err := r.root.OpenFile(name, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	lock, err := lockFile(context.Background(), f, 0)
	if err != nil {
		_ = f.Close()
		return
	}
	defer func() { _ = lock.Close() }()
	if r.dryRun {
		r.logger.Info("would remove a legacy lock file (dry run)", "file", name)
		return
	}
	if err := r.root.Remove(name); err != nil {
		r.logger.Warn("cannot remove a legacy lock file", "file", name, "error", err)
	}
}

// dropQuotaOf calls dropQuota when set.
func (r *retention) dropQuotaOf(user, chat string) error {
	if r.dropQuota == nil {
		return nil
	}
	return r.dropQuota(user, chat)
}

// lastUse is the chat's last release, or the workspace's mtime when it was
// never released through a lock file.
func (r *retention) lastUse(user, chat string) (time.Time, error) {
	fi, err := r.root.Lstat(chatLockName(user, chat))
	if err == nil && fi.Mode().IsRegular() {
		return fi.ModTime(), nil
	}
	for _, d := range []string{r.layout.Rel(user, chat), executor.LegacyRel(user, chat)} {
		if fi, err = r.root.Lstat(d); err == nil {
			return fi.ModTime(), nil
		}
	}
	return time.Time{}, fmt.Errorf("retention: %w", err)
}
