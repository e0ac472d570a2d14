package local

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

	sandboxes    *executor.Registry[*Sandbox] // by sandbox id
	*checkpoints                              // the workspaces' checkpoints (checkpoints.go)
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
	if e.checkpoints, err = e.newCheckpoints(); err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("local executor: %w", err)
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

// newPlan is executor.Normalize with this executor's lease wait and its
// capabilities. Errors wrap executor.ErrInvalid and name the field.
func (e *Executor) newPlan(spec executor.Spec) (plan, error) {
	spec.LeaseWait = cmp.Or(spec.LeaseWait, e.o.DefaultLeaseWait)
	spec, err := executor.Normalize(spec)
	if err == nil {
		err = errors.Join(e.Capabilities().Check(spec)...)
	}
	if err != nil {
		return plan{}, err
	}
	uid, gid, _ := executor.ParseUser(spec.User) // Normalize checked it
	return plan{spec: spec, uid: sandboxUID(uid), gid: sandboxGID(gid), deadline: time.Now().Add(spec.Timeout)}, nil
}

// Capabilities implements executor.Executor: one loopback per sandbox, no
// runtime, no keeping, and a quota that caps each file.
func (e *Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{Backend: "local", Pids: true, Quota: executor.QuotaPerFile,
		ModelRelay: e.o.ModelPort > 0, Restore: true, Environment: true, Checkpoints: true,
		Why: map[string]string{executor.KeyRuntime: "bubblewrap runs no OCI runtime; use the docker backend for one"}}
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
