package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// What a Store's caller outside this package needs to do what Host does,
// where the Store is not on the gateway's host: the helper runs it in a
// pod that mounts a chat's claims (executor/kubernetes).

// Head is the checkpoint the workspace was last restored to or taken as,
// or "".
func (s *Store) Head() string { return s.head() }

// RestoreInto makes ws, a workspace that is not this Store's (a fork's),
// checkpoint id's; the Store's head stays.
func (s *Store) RestoreInto(ctx context.Context, ws, id string) (Result, error) {
	return s.restoreInto(ctx, ws, id)
}

// Summary is the manifest without its entries.
func (m *Manifest) Summary() Summary { return m.summary() }

// MapError gives the executor's sentinels (ErrNotFound, ErrNoSpace) to
// the Store's errors.
func MapError(err error) error { return mapErr(err) }

// NewID returns a new checkpoint id, made at now, for Record.
func NewID(now time.Time) string { return newID(now) }

// Record publishes checkpoint id, labelled label and made at created, of
// an empty workspace, as a Take of one would, and makes it the head: a
// checkpoint its caller named without walking anything (executor/
// kubernetes names a new chat's start so before its claim exists, and
// has the next operation's pod record it). A Store that has checkpoints
// already is left as it is: it recorded this one before, or moved on
// past it.
func (s *Store) Record(id, label string, created time.Time) error {
	if !validID(id) {
		return fmt.Errorf("checkpoint: record %q: not a checkpoint id: %w", id, executor.ErrInvalid)
	}
	list, err := s.List()
	if err != nil || len(list) > 0 {
		return err
	}
	if err := s.publish(&Manifest{ID: id, Label: label, Created: created}); err != nil {
		return err
	}
	return s.setHead(id)
}
