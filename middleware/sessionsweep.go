package middleware

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// The session sweep removes the sessions of chats without a turn for
// Options.SessionRetention. Sessions are the middleware's own (SessionDir),
// so it sweeps them itself, on every backend; a chat's last turn is the
// newest modification time in its directory (each turn rewrites its
// session record). A chat whose lease is held, or whose container is
// kept, is left for the next sweep. The sweep walks with os.Root and never
// follows a symlink (the directory is host-only, but a sweep that deletes
// must not trust that).

// startSessionSweep runs sweepSessions at once and every
// SessionSweepInterval until ctx ends; Close waits for it.
func (o *Orchestrator) startSessionSweep(ctx context.Context) {
	if o.opts.SessionDir == "" || o.opts.SessionRetention < 0 || o.opts.SessionSweepInterval < 0 {
		return
	}
	// Not counted in o.bg: Settle waits for the work of answered
	// requests, and the sweep never ends before Close.
	o.sweeps.Add(1)
	go func() {
		defer o.sweeps.Done()
		t := time.NewTicker(o.opts.SessionSweepInterval)
		defer t.Stop()
		for {
			if n, err := o.sweepSessions(time.Now()); err != nil {
				o.log.Warn("session sweep: some chats' sessions could not be removed", "removed", n, "error", err)
			} else if n > 0 {
				o.log.Info("session sweep: removed the sessions of chats without a turn for the retention", "chats", n, "retention", o.opts.SessionRetention)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// sweepSessions removes, as of now, the sessions of every chat whose last
// turn is older than SessionRetention, and returns how many chats it
// removed.
func (o *Orchestrator) sweepSessions(now time.Time) (int, error) {
	root, err := os.OpenRoot(o.opts.SessionDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = root.Close() }()
	users, err := executor.ReadDirNoFollow(root, ".")
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, u := range users {
		if !u.IsDir() || executor.ValidateID("user", u.Name()) != nil {
			continue
		}
		chats, err := executor.ReadDirNoFollow(root, u.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, c := range chats {
			chat, ok := strings.CutPrefix(c.Name(), "chat-")
			if !ok || !c.IsDir() || executor.ValidateID("chat", chat) != nil {
				continue
			}
			dir := filepath.Join(u.Name(), c.Name())
			last, err := newestUnder(root, dir)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if now.Sub(last) < o.opts.SessionRetention {
				continue
			}
			place := chatID{u.Name(), chat}
			release, err := o.leases.Acquire(context.Background(), place.key(), 0)
			if err != nil {
				continue // a request holds the chat: it is not idle
			}
			if o.pool.has(place) {
				release()
				continue
			}
			err = root.RemoveAll(dir)
			release()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// newestUnder is the newest modification time of dir and what it holds,
// two levels down (the assistants' directories and their files), read
// with Lstat: a link counts as itself.
func newestUnder(root *os.Root, dir string) (time.Time, error) {
	fi, err := root.Lstat(dir)
	if err != nil {
		return time.Time{}, err
	}
	newest := fi.ModTime()
	subs, err := executor.ReadDirNoFollow(root, dir)
	if err != nil {
		return time.Time{}, err
	}
	for _, s := range subs {
		p := filepath.Join(dir, s.Name())
		fi, err := root.Lstat(p)
		if err != nil {
			continue
		}
		newest = later(newest, fi.ModTime())
		if !fi.IsDir() {
			continue
		}
		files, err := executor.ReadDirNoFollow(root, p)
		if err != nil {
			continue
		}
		for _, f := range files {
			if fi, err := root.Lstat(filepath.Join(p, f.Name())); err == nil {
				newest = later(newest, fi.ModTime())
			}
		}
	}
	return newest, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
