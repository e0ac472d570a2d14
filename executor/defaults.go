package executor

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Spec's limits and of a Cmd's output cap: the one source
// for every backend and for the config package, which applies the same
// values to package files (and lists them in config/REFERENCE.md). A zero
// field in a Spec takes its default; none of them is "unlimited".
const (
	DefaultMemoryBytes int64   = 2 << 30
	DefaultCPUs        float64 = 1
	DefaultPidsLimit   int64   = 256
	// DefaultTimeout is a sandbox's whole life per request.
	DefaultTimeout = 10 * time.Minute
	DefaultNetwork = "none"
	// DefaultUser is a uid:gid above the range distributions give to
	// accounts (1000-60000), so that the sandbox's files match no host
	// user. The image need not know it: backends give the sandbox a HOME
	// of its own.
	DefaultUser = "100000:100000"
	// DefaultUID and DefaultGID are DefaultUser's ids, for the host
	// sockets and files the sandbox user must own.
	DefaultUID = 100000
	DefaultGID = 100000
	// DefaultLeaseWait bounds the wait for another request of the chat.
	DefaultLeaseWait = 30 * time.Second
	// DefaultDiskBytes and DefaultInodes are a workspace's quota.
	DefaultDiskBytes int64 = 2 << 30
	DefaultInodes    int64 = 200_000
	// DefaultMaxOutput caps a command's stdout and stderr, each.
	DefaultMaxOutput int64 = 32 << 20
	// DefaultRetention is how long what a chat leaves on the host (its
	// workspace, its agent sessions) is kept after its last request;
	// DefaultRetentionInterval is how often the sweeps run.
	DefaultRetention         = 7 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
)

// ParseUser parses Spec.User, "uid:gid" or "uid" ("" is DefaultUser), into
// the ids that own what the host makes for the sandbox user (its sockets).
func ParseUser(user string) (uid, gid int, err error) {
	if user == "" {
		return DefaultUID, DefaultGID, nil
	}
	u, g, _ := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err == nil {
		gid = uid
		if g != "" {
			gid, err = strconv.Atoi(g)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("executor: sandbox user %q is not uid:gid; set sandbox.user to numbers, e.g. %q: %w", user, DefaultUser, ErrInvalid)
	}
	return uid, gid, nil
}
