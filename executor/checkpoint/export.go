package checkpoint

import "context"

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
