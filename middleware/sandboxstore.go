package middleware

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Client sandbox records on disk (Options.SandboxDir): one JSON file per
// user, {SandboxDir}/{user}.json, 0600 in a 0700 directory, replaced
// atomically (a temporary file and a rename) after every change, so that a
// gateway restarted (or another replica on the same data directory, once
// started) knows the sandboxes its clients hold: a client that reconnects
// after a crash lists them and goes on (seed 004 "Reconnection"). Kept
// containers do not survive a restart (the executor's reconciler and
// takeover remove a dead gateway's containers): a sandbox comes back idle,
// or stopped when its TTL passed meanwhile.

// maxSandboxFile bounds a user's record file when it is read back.
const maxSandboxFile = 1 << 20

// storedSandbox is one record in a user's file: the owner's view (its
// State is not read back) with the TTL and whether it stopped.
type storedSandbox struct {
	ClientSandbox
	TTLNs   time.Duration `json:"ttl_ns"`
	Stopped bool          `json:"stopped,omitempty"`
}

// save writes user's records, or removes the file when there are none.
// A failure is logged: the sandboxes keep working, a restart forgets
// them. Held: mu.
func (reg *sandboxRegistry) save(user string) {
	dir := reg.o.opts.SandboxDir
	if dir == "" {
		return
	}
	name := user + ".json"
	mine := reg.byUser[user]
	if len(mine) == 0 {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			reg.o.log.Warn("removing the client sandbox records failed", "user", user, "error", err)
		}
		return
	}
	list := make([]storedSandbox, 0, len(mine))
	for _, s := range mine {
		list = append(list, storedSandbox{ClientSandbox: s.ClientSandbox, TTLNs: s.TTL, Stopped: s.stopped})
	}
	slices.SortFunc(list, func(a, b storedSandbox) int { return strings.Compare(a.ID, b.ID) })
	b, err := json.Marshal(list)
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err == nil {
		err = writeAtomic(dir, name, b)
	}
	if err != nil {
		reg.o.log.Warn("the client sandbox records were not saved; a restart forgets them", "user", user, "error", err)
	}
}

// load reads the records New finds in SandboxDir. Every record is
// checked as a create would check it; a bad file or record is skipped with
// a warning, never trusted. A sandbox whose TTL passed while the gateway
// was down comes back stopped.
func (reg *sandboxRegistry) load() error {
	dir := reg.o.opts.SandboxDir
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("middleware: Options.SandboxDir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("middleware: Options.SandboxDir: %w", err)
	}
	now := time.Now()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, e := range entries {
		user, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		log := reg.o.log.With("file", filepath.Join(dir, e.Name()))
		if executor.ValidateID("user", user) != nil {
			log.Warn("skipping a client sandbox file not named after a user id")
			continue
		}
		list, err := readRecords(filepath.Join(dir, e.Name()))
		if err != nil {
			log.Warn("skipping an unreadable client sandbox file", "error", err)
			continue
		}
		mine := map[string]*clientSandbox{}
		for _, r := range list {
			if executor.ValidateID("sandbox id", r.ID) != nil || r.TTLNs < MinSandboxTTL || r.TTLNs > MaxSandboxTTL || checkTags(r.Tags) != nil ||
				mine[r.ID] != nil || len(mine) >= MaxSandboxesPerUser {
				log.Warn("skipping an invalid client sandbox record", "sandbox", r.ID)
				continue
			}
			s := &clientSandbox{ClientSandbox: ClientSandbox{ID: r.ID, Assistant: r.Assistant, Tags: r.Tags, TTL: r.TTLNs,
				Created: r.Created.UTC(), Expires: r.Expires.UTC()}, user: user, stopped: r.Stopped || !now.Before(r.Expires)}
			wait := r.Expires.Sub(now)
			if s.stopped {
				wait = max(r.Expires.Add(SandboxForget).Sub(now), 0)
			}
			s.timer = time.AfterFunc(wait, func() { reg.expire(s) })
			mine[r.ID] = s
		}
		if len(mine) > 0 {
			reg.byUser[user] = mine
		}
	}
	return nil
}

// readRecords reads one user's file.
func readRecords(name string) ([]storedSandbox, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var list []storedSandbox
	dec := json.NewDecoder(io.LimitReader(f, maxSandboxFile))
	if err := dec.Decode(&list); err != nil {
		return nil, err
	}
	return list, nil
}
