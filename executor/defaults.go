package executor

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Defaults and bounds of a Spec and of a Cmd's output cap: the one table
// for every backend (each one's plan starts with Normalize) and for the
// config package, which applies the same defaults to package files and
// lists them in config/REFERENCE.md. A zero field in a Spec takes its
// default; none of them is "unlimited", and a value out of bounds is
// refused.
const (
	DefaultMemoryBytes int64 = 2 << 30
	// MinMemoryBytes is the least a container runtime accepts (Docker's 6 MiB).
	MinMemoryBytes int64 = 6 << 20

	DefaultCPUs float64 = 1
	MinCPUs     float64 = 0.01
	MaxCPUs     float64 = 1024

	DefaultPidsLimit int64 = 256
	// MinPidsLimit leaves room for init, the helper and a command;
	// MaxPidsLimit is the kernel's PID_MAX_LIMIT.
	MinPidsLimit int64 = 8
	MaxPidsLimit int64 = 1 << 22

	// DefaultTimeout is a sandbox's whole life per request.
	DefaultTimeout = 10 * time.Minute
	MinTimeout     = time.Second

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

	// DefaultDiskBytes and DefaultInodes are a workspace's quota; a zero
	// Inodes takes DefaultInodesFor(DiskBytes), and Inodes may not exceed
	// one per KiB of DiskBytes.
	DefaultDiskBytes int64 = 2 << 30
	MinDiskBytes     int64 = 16 << 20
	DefaultInodes    int64 = 200_000
	MinInodes        int64 = 1000
	MaxInodes        int64 = 1 << 31

	// DefaultMaxOutput caps a command's stdout and stderr, each.
	DefaultMaxOutput int64 = 32 << 20
	// DefaultRetention is how long what a chat leaves on the host (its
	// workspace, its agent sessions) is kept after its last request;
	// DefaultRetentionInterval is how often the sweeps run.
	DefaultRetention         = 7 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
)

// The assistant options that set a Spec's fields: keys of the "sandbox"
// block of a package file (config/REFERENCE.md). The config package's
// option table and every message naming a setting (Normalize,
// Capabilities.Check) take them from here.
const (
	KeyMemory    = "max_memory"
	KeyCPUs      = "max_cpu"
	KeyPids      = "pids"
	KeyTimeout   = "timeout"
	KeyNetwork   = "network"
	KeyRuntime   = "runtime"
	KeyUser      = "user"
	KeyLeaseWait = "lease_wait"
	KeyDisk      = "max_disk"
	KeyInodes    = "max_inodes"
	KeyEgress    = "egress"
	// KeyPolicy "session" is what sets IdleTTL.
	KeyPolicy = "policy"
)

// DefaultInodesFor is the inode quota of a workspace of disk bytes: one
// per 8 KiB on small disks (inode tables are space too), DefaultInodes at
// most.
func DefaultInodesFor(disk int64) int64 {
	return max(min(DefaultInodes, disk/8192), MinInodes)
}

var (
	networkRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	runtimeRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	userRe    = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
)

// Normalize is the one provision-then-validate step of a Spec, with which
// every backend's plan starts: it fills each zero field from the table
// above, then refuses every value out of bounds at once, each error naming
// the field and the option that sets it and wrapping ErrInvalid. What is
// left to a backend is its own: the image default, which networks and
// runtimes it runs (Capabilities), the user it runs as.
func Normalize(spec Spec) (Spec, error) {
	errs := []error{ValidateID("user id", spec.UserID), ValidateID("chat id", spec.ChatID)}
	if spec.AssistantID != "" {
		errs = append(errs, ValidateID("assistant id", spec.AssistantID))
	}
	if spec.Inodes == 0 && spec.DiskBytes >= 0 {
		spec.Inodes = DefaultInodesFor(cmp.Or(spec.DiskBytes, DefaultDiskBytes))
	}
	errs = append(errs,
		bound("MemoryBytes", KeyMemory, &spec.MemoryBytes, DefaultMemoryBytes, MinMemoryBytes, 0, FormatBytes, "; container runtimes refuse less than 6 MiB"),
		bound("CPUs", KeyCPUs, &spec.CPUs, DefaultCPUs, MinCPUs, MaxCPUs, plain, ""),
		bound("PidsLimit", KeyPids, &spec.PidsLimit, DefaultPidsLimit, MinPidsLimit, MaxPidsLimit, plain, "; init, the helper and a command need room"),
		bound("Timeout", KeyTimeout, &spec.Timeout, DefaultTimeout, MinTimeout, 0, time.Duration.String, ""),
		bound("LeaseWait", KeyLeaseWait, &spec.LeaseWait, DefaultLeaseWait, 0, 0, time.Duration.String, ""),
		bound("DiskBytes", KeyDisk, &spec.DiskBytes, DefaultDiskBytes, MinDiskBytes, 0, FormatBytes, ""),
		bound("Inodes", KeyInodes, &spec.Inodes, DefaultInodes, MinInodes, MaxInodes, plain, ""))
	if spec.DiskBytes > 0 && spec.Inodes > spec.DiskBytes/1024 {
		// ext4 cannot hold more than one inode per KiB of its size.
		errs = append(errs, fmt.Errorf("spec: Inodes %d is more than one per KiB of DiskBytes %d; lower it (sandbox.%s) or raise DiskBytes (sandbox.%s): %w", spec.Inodes, spec.DiskBytes, KeyInodes, KeyDisk, ErrInvalid))
	}
	spec.Network = cmp.Or(spec.Network, DefaultNetwork)
	if spec.Network == "host" || !networkRe.MatchString(spec.Network) {
		errs = append(errs, fmt.Errorf("spec: Network %q is not allowed (sandbox.%s); use %q (the default) or a network's name, never host or container:<id>: %w", spec.Network, KeyNetwork, DefaultNetwork, ErrInvalid))
	}
	if spec.Runtime != "" && !runtimeRe.MatchString(spec.Runtime) {
		errs = append(errs, fmt.Errorf("spec: Runtime %q is not a runtime name, e.g. runsc (sandbox.%s): %w", spec.Runtime, KeyRuntime, ErrInvalid))
	}
	spec.User = cmp.Or(spec.User, DefaultUser)
	errs = append(errs, checkUser(spec.User))
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("spec: Env entry %q is not KEY=VALUE: %w", kv, ErrInvalid))
		}
	}
	return spec, errors.Join(errs...)
}

// bound fills *v with def when it is zero and checks it against lo and
// hi (0: no maximum); NaN is below every minimum.
func bound[T int64 | float64 | time.Duration](field, key string, v *T, def, lo, hi T, show func(T) string, why string) error {
	if *v == 0 {
		*v = def
	}
	switch {
	case *v < lo || math.IsNaN(float64(*v)):
		return fmt.Errorf("spec: %s %v is below the minimum of %s%s; use at least %s (sandbox.%s), or 0 for the default %s; negative is not unlimited: %w", field, *v, show(lo), why, show(lo), key, show(def), ErrInvalid)
	case hi != 0 && *v > hi:
		return fmt.Errorf("spec: %s %v is above the maximum of %s; use at most %s (sandbox.%s): %w", field, *v, show(hi), show(hi), key, ErrInvalid)
	}
	return nil
}

func plain[T int64 | float64](v T) string { return fmt.Sprint(v) }

// checkUser refuses a Spec.User that is not numeric uid:gid or is root.
func checkUser(user string) error {
	m := userRe.FindStringSubmatch(user)
	if m == nil {
		return fmt.Errorf("spec: User %q is not numeric uid:gid, e.g. %q (sandbox.%s): %w", user, DefaultUser, KeyUser, ErrInvalid)
	}
	uid, err1 := strconv.Atoi(m[1])
	gid, err2 := strconv.Atoi(m[2])
	switch {
	case err1 != nil || err2 != nil || uid > math.MaxInt32 || gid > math.MaxInt32:
		return fmt.Errorf("spec: User %q is out of range (sandbox.%s): %w", user, KeyUser, ErrInvalid)
	case uid == 0 || gid == 0:
		return fmt.Errorf("spec: User %q is root; sandboxes run as a non-root user such as %q (sandbox.%s): %w", user, DefaultUser, KeyUser, ErrInvalid)
	}
	return nil
}

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
