package executor

import (
	"fmt"
	"time"
)

// Shared is what a gateway sets once for whichever backend it opens
// (each backend's Options.OpenExecutor): where the host keeps what the
// chats leave, and for how long after a chat's last request.
type Shared struct {
	// DataDir is the gateway's data directory; backends that keep
	// workspaces on the host keep them there.
	DataDir string
	// Retention is how long a chat's workspace is kept after its last
	// request: 0 is DefaultRetention, negative forever.
	Retention time.Duration
	// Images are the sandbox images the gateway's assistants name, in
	// the catalog's order: each carries the helper, so a backend that
	// runs the helper in pods of its own (Kubernetes' checkpoint pods)
	// can use one before any sandbox ran.
	Images []string
}

// Fill sets *dataDir and *retention, a backend's own options, from s where
// they are unset; one that is set to another value than s's is an error
// naming both, since the middleware keeps the chats' sessions for s's.
func (s Shared) Fill(dataDir *string, retention *time.Duration) error {
	switch {
	case dataDir != nil && *dataDir != "" && *dataDir != s.DataDir:
		return fmt.Errorf("the backend's DataDir %q is not the gateway's %q; set it once, in the gateway's options: %w", *dataDir, s.DataDir, ErrInvalid)
	case retention != nil && *retention != 0 && s.Retention != 0 && *retention != s.Retention:
		return fmt.Errorf("the backend's Retention %v is not the gateway's %v; set it once, in the gateway's options: %w", *retention, s.Retention, ErrInvalid)
	}
	if dataDir != nil {
		*dataDir = s.DataDir
	}
	if retention != nil && *retention == 0 {
		*retention = s.Retention
	}
	return nil
}
