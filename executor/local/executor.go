package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// Executor creates bubblewrap sandboxes on this host. Create it with New;
// Close it once.
type Executor struct {
	o         Options
	logger    hclog.Logger
	bwrap     string
	prlimit   string
	helperBin string
	cgroups   *cgroupBase // nil: rlimits only
	leases    *executor.Leases
	root      *os.Root // DataDir

	envOnce sync.Once
	env     executor.Environment
	envErr  error

	sandboxes *executor.Registry[*Sandbox] // by sandbox id
}

var _ executor.Executor = (*Executor)(nil)

// New runs the health check (Check), prepares the data directory and
// detects the cgroups it can use. Its error lists everything missing.
func New(ctx context.Context, o Options) (*Executor, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	tools, err := check(ctx, o)
	if err != nil {
		return nil, err
	}
	helperBin, err := filepath.Abs(o.HelperBinary)
	if err != nil {
		return nil, fmt.Errorf("local executor: helper binary: %w", err)
	}
	var cg *cgroupBase
	why := "turned off (Options.Cgroups)"
	if o.Cgroups != CgroupOff {
		cg, why = detectCgroups(o.CgroupRoot)
		if cg == nil && o.Cgroups == CgroupRequire {
			return nil, &HealthError{Problems: []string{"no writable cgroup for the sandboxes' memory, cpu and pids limits (" + why + "): run the gateway as root with /sys/fs/cgroup writable, or use CgroupAuto to run with rlimits only"}}
		}
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(stageDir, 0o755); err != nil {
			return nil, fmt.Errorf("local executor: create the staging mount point %s: %w", stageDir, err)
		}
	}
	if err := os.Chmod(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("local executor: make %s private (0700): %w", o.DataDir, err)
	}
	root, err := os.OpenRoot(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local executor: open data directory: %w", err)
	}
	for _, d := range []string{"workspaces", "sandboxes", locksDir} {
		if err := root.MkdirAll(d, 0o700); err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("local executor: create %s/%s: %w", o.DataDir, d, err)
		}
	}
	e := &Executor{
		o: o, logger: o.Logger, bwrap: tools.bwrap, prlimit: tools.prlimit, helperBin: helperBin, cgroups: cg,
		leases: executor.NewLeases(), root: root, sandboxes: executor.NewRegistry[*Sandbox](),
	}
	e.logger.Info("local executor ready (bubblewrap, no container)", "bwrap", tools.bwrap, "data", o.DataDir,
		"sandbox_uid", sandboxUID(DefaultUID), "limits", cg.describe(), "cgroup_note", why)
	e.logger.Info("workspace quota: per file only",
		"bound", "no file past max_disk (RLIMIT_FSIZE); the workspace's total and its number of files are not bounded (the docker executor bounds them)")
	return e, nil
}

// Limits says which limits this executor enforces ("cgroup v1: memory,
// cpu, pids", or rlimits only), for logs and the environment snapshot.
func (e *Executor) Limits() string { return e.cgroups.describe() }

// plan is a validated Spec with its defaults.
type plan struct {
	spec     executor.Spec
	uid, gid int
	deadline time.Time
}

var userRe = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)

// newPlan validates spec for local mode. Errors wrap executor.ErrInvalid
// and name the field.
func (e *Executor) newPlan(spec executor.Spec) (plan, error) {
	var p plan
	if err := executor.ValidateID("user id", spec.UserID); err != nil {
		return p, err
	}
	if err := executor.ValidateID("chat id", spec.ChatID); err != nil {
		return p, err
	}
	if spec.AssistantID != "" {
		if err := executor.ValidateID("assistant id", spec.AssistantID); err != nil {
			return p, err
		}
	}
	if spec.Network != "" && spec.Network != "none" {
		return p, fmt.Errorf("spec: Network %q: local mode has no container networks, only loopback; use \"none\" or the docker executor: %w", spec.Network, executor.ErrInvalid)
	}
	if spec.Runtime != "" {
		return p, fmt.Errorf("spec: Runtime %q: local mode runs no OCI runtime; leave it empty or use the docker executor: %w", spec.Runtime, executor.ErrInvalid)
	}
	if spec.MemoryBytes == 0 {
		spec.MemoryBytes = DefaultMemoryBytes
	}
	if spec.MemoryBytes < 6<<20 {
		return p, fmt.Errorf("spec: MemoryBytes %d is below 6 MiB (negative is not unlimited): %w", spec.MemoryBytes, executor.ErrInvalid)
	}
	if spec.CPUs == 0 {
		spec.CPUs = DefaultCPUs
	}
	if spec.CPUs < 0.01 || spec.CPUs > 1024 || math.IsNaN(spec.CPUs) {
		return p, fmt.Errorf("spec: CPUs %v is out of range; give a core count between 0.01 and 1024: %w", spec.CPUs, executor.ErrInvalid)
	}
	switch {
	case spec.PidsLimit == 0:
		spec.PidsLimit = DefaultPidsLimit
	case spec.PidsLimit < 8:
		return p, fmt.Errorf("spec: PidsLimit %d leaves no room for init, the helper and a command; use at least 8: %w", spec.PidsLimit, executor.ErrInvalid)
	}
	switch {
	case spec.DiskBytes == 0:
		// The workspace quota, here a per-file cap (RLIMIT_FSIZE).
		spec.DiskBytes = executor.DefaultDiskBytes
	case spec.DiskBytes < minDiskBytes:
		return p, fmt.Errorf("spec: DiskBytes %d is below the minimum of %s (negative is not unlimited): %w", spec.DiskBytes, executor.FormatBytes(minDiskBytes), executor.ErrInvalid)
	}
	if spec.Timeout == 0 {
		spec.Timeout = DefaultSandboxTimeout
	}
	if spec.Timeout < time.Second {
		return p, fmt.Errorf("spec: Timeout %v is shorter than a second (negative is not unlimited): %w", spec.Timeout, executor.ErrInvalid)
	}
	if spec.User == "" {
		spec.User = DefaultUser
	}
	m := userRe.FindStringSubmatch(spec.User)
	if m == nil {
		return p, fmt.Errorf("spec: User %q is not numeric uid:gid (e.g. %q): %w", spec.User, DefaultUser, executor.ErrInvalid)
	}
	uid, err1 := strconv.Atoi(m[1])
	gid, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || uid > math.MaxInt32 || gid > math.MaxInt32 {
		return p, fmt.Errorf("spec: User %q is out of range: %w", spec.User, executor.ErrInvalid)
	}
	if uid == 0 || gid == 0 {
		return p, fmt.Errorf("spec: User %q is root; sandboxes run as a non-root user such as %q: %w", spec.User, DefaultUser, executor.ErrInvalid)
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return p, fmt.Errorf("spec: Env entry %q is not KEY=VALUE: %w", kv, executor.ErrInvalid)
		}
	}
	if spec.LeaseWait < 0 {
		return p, fmt.Errorf("spec: LeaseWait %v is negative: %w", spec.LeaseWait, executor.ErrInvalid)
	}
	if spec.LeaseWait == 0 {
		spec.LeaseWait = e.o.DefaultLeaseWait
	}
	p.spec = spec
	p.uid, p.gid = sandboxUID(uid), sandboxGID(gid)
	p.deadline = time.Now().Add(spec.Timeout)
	return p, nil
}

// Create leases the chat (waiting up to Spec.LeaseWait), prepares its
// workspace and host directory, starts bwrap with the helper as the
// sandbox's first process and returns once the helper answers. Spec.Image
// is not used: local mode shows the host's /usr and /etc read-only.
func (e *Executor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	start := time.Now()
	p, err := e.newPlan(spec)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	user, chat := p.spec.UserID, p.spec.ChatID
	logger := e.logger.With("user", user, "chat", chat)
	id := randomID()
	done, err := e.sandboxes.Begin(id)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer done()

	unlease, err := e.leases.Acquire(ctx, user+"/"+chat, p.spec.LeaseWait)
	if err != nil {
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	lock, err := e.lockChat(ctx, user, chat, p.spec.LeaseWait-time.Since(start))
	if err != nil {
		unlease()
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	release := func() {
		now := time.Now()
		_ = e.root.Chtimes(chatLockName(user, chat), now, now)
		_ = lock.Close()
		unlease()
	}
	sb, err := e.start(ctx, p, id, logger)
	if err != nil {
		release()
		logger.Warn("create sandbox failed", "error", err)
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	sb.release = release
	if err := e.sandboxes.Add(ctx, sb.id, sb); err != nil {
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	logger.Debug("sandbox ready", "sandbox", sb.id, "pid", sb.initPID, "duration", time.Since(start))
	return sb, nil
}

// makeHostDir creates {data}/sandboxes/{id}, mode 0700, owned by the
// sandbox user.
func (e *Executor) makeHostDir(id string, uid, gid int) (string, error) {
	name := filepath.Join("sandboxes", id)
	if err := e.root.Mkdir(name, 0o700); err != nil {
		return "", fmt.Errorf("create host dir: %w", err)
	}
	if err := e.root.Lchown(name, uid, gid); err != nil && os.Geteuid() != uid {
		_ = e.root.Remove(name)
		return "", fmt.Errorf("chown host dir to %d:%d (run the gateway as root or as the sandbox user): %w", uid, gid, err)
	}
	return filepath.Join(e.o.DataDir, name), nil
}

// removeHostDir deletes {data}/sandboxes/{id} and what the helper left.
func (e *Executor) removeHostDir(id string) error {
	if err := e.root.RemoveAll(filepath.Join("sandboxes", id)); err != nil {
		return fmt.Errorf("remove host dir: %w", err)
	}
	return nil
}

// locksDir holds the chats' lock files, as executor/docker keeps them, so
// that a docker and a local gateway on one data directory exclude each
// other per chat.
const locksDir = "locks"

func chatLockName(user, chat string) string { return filepath.Join(locksDir, user, chat+".lock") }

// lockChat flocks the chat's lock file, waiting up to wait.
func (e *Executor) lockChat(ctx context.Context, user, chat string, wait time.Duration) (*os.File, error) {
	if err := e.root.MkdirAll(filepath.Join(locksDir, user), 0o700); err != nil {
		return nil, fmt.Errorf("create the chat's lock directory: %w", err)
	}
	f, err := e.root.OpenFile(chatLockName(user, chat), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("chat lock: %w", err)
	}
	deadline := time.Now().Add(max(wait, 0))
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !time.Now().Before(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("another gateway is using this chat (%s is locked); retry later: %w", f.Name(), executor.ErrBusy)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close closes the sandboxes still open and releases the data directory.
// It is safe to call more than once.
func (e *Executor) Close() error {
	if !e.sandboxes.Shut() {
		return nil
	}
	_, err := e.sandboxes.CloseAll(context.Background())
	return errors.Join(err, e.root.Close())
}

// randomID returns 16 hex digits.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
