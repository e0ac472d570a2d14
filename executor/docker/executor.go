package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// Executor creates Docker sandboxes. Create it with New; Close it once.
type Executor struct {
	o      Options
	api    dockerAPI
	logger hclog.Logger
	leases *executor.Leases
	root   *os.Root // DataDir
	layout *executor.WorkspaceLayout
	inst   *fileLock
	quota  quotaEnforcer
	// daemonHost names the daemon in errors ("unix:///var/run/docker.sock").
	daemonHost string

	sandboxes  *executor.Registry[*Sandbox] // by sandbox id
	warnedUIDs sync.Map                     // sandbox uids already checked against the host's accounts

	// sandboxesTmpfs: this executor mounted the tmpfs at {data}/sandboxes.
	sandboxesTmpfs bool

	// noHostKill turns the host-side kill path off (tests of the script).
	noHostKill bool

	env          envSnapshots // environment snapshots (environment.go)
	caps         executor.Capabilities
	*checkpoints // the workspaces' checkpoints (checkpoints.go)

	pool    *pool // nil without Options.Pool
	rec     *reconciler
	ret     *retention
	stopBg  chan struct{}
	bgDone  sync.WaitGroup
	closeMu sync.Mutex
}

var _ executor.Executor = (*Executor)(nil)

// New connects to the Docker daemon (DOCKER_HOST or Options.DockerHost,
// with API version negotiation), takes the instance lock, removes orphaned
// containers once and starts the reconciler and retention timers.
func New(ctx context.Context, o Options) (*Executor, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if o.DockerHost != "" {
		opts = append(opts, client.WithHost(o.DockerHost))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker executor: docker client: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, o.CallTimeout)
	defer cancel()
	if _, err := cli.Ping(pingCtx); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker executor: the Docker daemon at %s does not answer; start dockerd or set DOCKER_HOST: %w (%w)", cli.DaemonHost(), executor.ErrUnavailable, err)
	}
	info, err := cli.Info(pingCtx)
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker executor: ask the Docker daemon at %s which runtimes it has: %w (%w)", cli.DaemonHost(), executor.ErrUnavailable, err)
	}
	e, err := newExecutor(ctx, o, cli)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	e.caps.Runtimes = slices.Sorted(maps.Keys(info.Runtimes))
	return e, nil
}

// capabilities are what the executor honours given its options (the
// daemon's runtimes are New's to add).
func (e *Executor) capabilities() executor.Capabilities {
	helper := e.o.helperPath() != ""
	c := executor.Capabilities{Backend: "docker", Pids: true, Networks: true, Quota: executor.QuotaWatchdog, Keep: true,
		Egress: helper && e.o.EgressPort > 0, ModelRelay: helper && e.o.ModelPort > 0, Restore: true, Environment: true, Pool: e.o.Pool,
		Why: map[string]string{executor.KeyRuntime: "register it with the Docker daemon, e.g. runsc for gVisor"}}
	if e.quota.mode() == QuotaLoop {
		c.Quota = executor.QuotaFilesystem
	} else {
		c.Checkpoints = true
	}
	switch {
	case !helper:
		c.Why[executor.KeyEgress] = "it runs without the helper; set Options.HelperBinary or UseImageHelper"
	case !c.Egress:
		c.Why[executor.KeyEgress] = "Options.EgressPort turns the relay off"
	}
	return c
}

// Capabilities implements executor.Executor.
func (e *Executor) Capabilities() executor.Capabilities { return e.caps }

// newExecutor builds an Executor over api (a fake in unit tests).
func newExecutor(ctx context.Context, o Options, api dockerAPI) (*Executor, error) {
	if err := privateDataDir(o.DataDir, o.Logger); err != nil {
		return nil, err
	}
	layout, err := executor.OpenWorkspaceLayout(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("docker executor: %w", err)
	}
	for _, dir := range []string{executor.WorkspacesDir, sandboxesDir, "instances", locksDir} {
		if err := os.MkdirAll(filepath.Join(o.DataDir, dir), 0o700); err != nil {
			return nil, fmt.Errorf("docker executor: create %s: %w", filepath.Join(o.DataDir, dir), err)
		}
	}
	root, err := os.OpenRoot(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("docker executor: open data directory: %w", err)
	}
	e := &Executor{
		o:         o,
		api:       api,
		logger:    o.Logger.Named("docker").With("instance", o.InstanceID),
		leases:    executor.NewLeases(),
		root:      root,
		layout:    layout,
		sandboxes: executor.NewRegistry[*Sandbox](),
		stopBg:    make(chan struct{}),

		daemonHost: "DOCKER_HOST",
	}
	if h, ok := api.(interface{ DaemonHost() string }); ok {
		e.daemonHost = h.DaemonHost()
	}
	if e.inst, err = e.lockInstance(); err != nil {
		_ = root.Close()
		return nil, err
	}
	if e.quota, err = newQuota(o, root, layout, e.logger); err != nil {
		_ = e.inst.Close()
		_ = root.Close()
		return nil, err
	}
	if e.checkpoints, err = e.newCheckpoints(); err != nil {
		_ = e.inst.Close()
		_ = root.Close()
		return nil, fmt.Errorf("docker executor: %w", err)
	}
	e.caps = e.capabilities()
	e.sweepPools()
	if e.pool, err = e.openPool(); err != nil {
		_ = e.inst.Close()
		_ = root.Close()
		return nil, err
	}
	if e.quota.mode() == QuotaLoop {
		if e.sandboxesTmpfs, err = e.mountSandboxesTmpfs(); err != nil {
			e.logger.Warn("host dirs stay on the data directory's filesystem; containers see its path in their mountinfo", "error", err)
		}
	}
	e.rec = e.newReconciler()
	e.ret = e.newRetention()
	if _, err := e.rec.reconcile(ctx); err != nil {
		e.logger.Warn("initial reconcile failed", "error", err)
	}
	e.every(o.ReconcileInterval, func(ctx context.Context) {
		if _, err := e.rec.reconcile(ctx); err != nil {
			e.logger.Warn("reconcile failed", "error", err)
		}
	})
	e.every(o.RetentionInterval, func(ctx context.Context) {
		if _, err := e.ret.sweep(ctx); err != nil {
			e.logger.Warn("workspace retention sweep failed", "error", err)
		}
	})
	if e.pool != nil {
		e.every(min(o.PoolIdle/2, time.Minute), func(context.Context) { e.pool.Expire() })
	}
	e.warnHostAccount(executor.DefaultUID)
	e.logger.Debug("executor started", "data_dir", o.DataDir)
	return e, nil
}

// privateDataDir creates DataDir mode 0700, or makes an existing one 0700
// when this process owns it: workspaces inside are the sandbox user's
// files, readable by anyone who reaches them, so no other host account
// may traverse DataDir. A DataDir of another owner that is open to others
// is refused with what to do.
func privateDataDir(dir string, logger hclog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("docker executor: create data directory %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("docker executor: data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("docker executor: data directory %s is not a directory: %w", dir, executor.ErrInvalid)
	}
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		owner := -1
		if ok {
			owner = int(st.Uid)
		}
		return fmt.Errorf("docker executor: data directory %s is mode %04o and owned by uid %d, not by this process (uid %d); other host users could read the workspaces: run `chmod 0700 %s` or run the gateway as its owner: %w",
			dir, perm, owner, os.Geteuid(), dir, executor.ErrInvalid)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("docker executor: make data directory %s private (chmod 0700): %w", dir, err)
	}
	logger.Warn("data directory was open to other host users; made it 0700", "data_dir", dir, "old_mode", fmt.Sprintf("%04o", perm))
	return nil
}

// passwdFile is the host's account list, read to warn about a sandbox uid
// that is also a host user's.
var passwdFile = "/etc/passwd"

// warnHostAccount logs a warning, once per uid, when the sandbox uid is a
// host account: files the agent writes would then be that account's.
func (e *Executor) warnHostAccount(uid int) {
	id := strconv.Itoa(uid)
	if _, done := e.warnedUIDs.LoadOrStore(id, true); done {
		return
	}
	if name := hostAccount(passwdFile, id); name != "" {
		e.logger.Warn("the sandbox uid is a host account; its files in the workspaces are that account's. Pick a uid no host user has (sandbox user, e.g. \"100000:100000\")",
			"uid", id, "account", name)
	}
}

// hostAccount returns the name of the account with uid in the passwd file,
// or "" when there is none (or the file cannot be read).
func hostAccount(passwd, uid string) string {
	data, err := os.ReadFile(passwd)
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[2] == uid && !strings.HasPrefix(f[0], "#") {
			return f[0]
		}
	}
	return ""
}

// every runs f every interval until Close (interval < 0: never).
func (e *Executor) every(interval time.Duration, f func(context.Context)) {
	if interval < 0 {
		return
	}
	e.bgDone.Add(1)
	go func() {
		defer e.bgDone.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-e.stopBg:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), interval)
				f(ctx)
				cancel()
			}
		}
	}()
}

// instanceLockName is the instance's lock file under DataDir; a live
// instance holds an flock on it for its whole life.
func instanceLockName(id string) string { return filepath.Join("instances", id+".lock") }

// lockInstance takes this instance's lock, making sure the file it locked
// is still the one at the path (a reconciler may delete a dead instance's
// file between our open and our flock).
func (e *Executor) lockInstance() (*fileLock, error) {
	name := instanceLockName(e.o.InstanceID)
	for range 10 {
		f, err := e.root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("docker executor: instance lock: %w", err)
		}
		l, err := lockFile(context.Background(), f, 0)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("docker executor: instance %q is already running with data directory %s; give each gateway its own InstanceID: %w", e.o.InstanceID, e.o.DataDir, err)
		}
		if sameFile(f, e.root, name) {
			return l, nil
		}
		_ = l.Close()
	}
	return nil, fmt.Errorf("docker executor: instance lock %s keeps changing: %w", name, executor.ErrBusy)
}

// sameFile reports whether the open f is the file now at name.
func sameFile(f *os.File, root *os.Root, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := root.Lstat(name)
	return err == nil && os.SameFile(a, b)
}

// Create leases the chat (waiting up to Spec.LeaseWait), prepares its
// workspace, starts a container over it with the baseline and returns once
// a command can run in it. On any failure nothing is left behind.
func (e *Executor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	start := time.Now()
	p, err := newPlan(spec, e.o, start)
	if err == nil {
		err = errors.Join(e.caps.Check(p.spec)...)
	}
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	user, chat := p.spec.UserID, p.spec.ChatID
	logger := e.logger.With("user", user, "chat", chat)
	e.warnHostAccount(p.uid)
	sbID := randomID()
	done, err := e.sandboxes.Begin(sbID)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer done()

	unlease, err := e.leases.Acquire(ctx, user+"/"+chat, p.spec.LeaseWait)
	if err != nil {
		logger.Debug("chat busy", "error", err)
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	lock, err := e.lockChat(ctx, user, chat, p.spec.LeaseWait-time.Since(start))
	if err != nil {
		unlease()
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	release := func() {
		e.touchChat(user, chat)
		_ = lock.Close()
		unlease()
	}
	if err := e.takeOver(ctx, user, chat, logger); err != nil {
		release()
		logger.Warn("create sandbox failed", "error", err)
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	sb, err := e.start(ctx, p, sbID, logger)
	if err != nil {
		release()
		logger.Warn("create sandbox failed", "error", err)
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	sb.release = release
	err = e.sandboxes.Add(ctx, sb.sandboxID, sb)
	if sb.begun != nil {
		// An adopted pooled container: registered as open (or closed) now.
		sb.begun()
		sb.begun = nil
	}
	if err != nil {
		return nil, fmt.Errorf("create sandbox for chat %s: %w", chat, err)
	}
	logger.Debug("sandbox ready", "sandbox", sb.sandboxID, "pooled", sb.sandboxID != sbID, "container", shortID(sb.id), "duration", time.Since(start), "exec_path", sb.runner.path(), "oom_counter", fmt.Sprintf("%T", sb.oom))
	return sb, nil
}

// start prepares the workspace, then binds it into a pooled container
// when the pool has one for p (Options.Pool), else creates and starts a
// container over it and waits until it runs commands. It cleans up after
// itself on failure.
func (e *Executor) start(ctx context.Context, p plan, sbID string, logger hclog.Logger) (_ *Sandbox, err error) {
	if err := checkFreeSpace(e.o.DataDir, e.o.MinFreeBytes); err != nil {
		return nil, err
	}
	if err := e.quota.beforePrepare(p.spec.UserID, p.spec.ChatID); err != nil {
		return nil, err
	}
	wsDir, err := e.layout.Prepare(p.spec.UserID, p.spec.ChatID, p.uid, p.gid)
	if err != nil {
		return nil, err
	}
	// Set once the container runs (its id written): the quota's control
	// does nothing before.
	var sbOver atomic.Pointer[Sandbox]
	quota, err := e.quota.attach(ctx, p, wsDir, sandboxControl{
		over: func(err error) {
			if s := sbOver.Load(); s != nil {
				s.stop(ctx, err.Error())
			}
		},
		freeze: func() (func(), bool) {
			if s := sbOver.Load(); s != nil {
				return s.freeze()
			}
			return nil, false
		},
	})
	if err != nil {
		return nil, err
	}
	wsOpts := e.o.Workspace
	wsOpts.UID, wsOpts.GID = p.uid, p.gid
	ws, err := executor.OpenWorkspace(wsDir, wsOpts)
	if err != nil {
		return nil, errors.Join(err, quota.release())
	}
	if entry := e.pool.take(p); entry != nil {
		sb, err := e.pool.adopt(ctx, entry, p, wsDir, logger)
		if err == nil {
			sb.ws, sb.HostFS, sb.quota = ws, ws, quota
			sbOver.Store(sb)
			return sb, nil
		}
		logger.Warn("a pooled container could not take the workspace; starting a new one", "error", err)
	}
	hostDir, err := e.makeHostDir(sbID, p.uid, p.gid)
	if err != nil {
		return nil, errors.Join(err, ws.Close(), quota.release())
	}
	sb := &Sandbox{e: e, sandboxID: sbID, hostDir: hostDir, ws: ws, HostFS: ws, quota: quota, plan: p, logger: logger.With("sandbox", sbID)}
	defer func() {
		if err != nil {
			if cerr := errors.Join(e.discard(ctx, sb), ws.Close(), quota.release()); cerr != nil {
				logger.Error("cleanup after failed create", "error", cerr)
			}
		}
	}()
	cfg, hc := e.containerConfig(p, sbID, wsDir, hostDir)
	if err := e.run(ctx, sb, cfg, hc); err != nil {
		return nil, err
	}
	sbOver.Store(sb)
	return sb, nil
}

// run creates and starts sb's container from cfg and hc and waits until it
// runs commands; on error the caller removes what was made (discard).
func (e *Executor) run(ctx context.Context, sb *Sandbox, cfg *container.Config, hc *container.HostConfig) error {
	p := sb.plan
	helperBin := e.o.helperPath()
	if helperBin != "" {
		cfg.Cmd = p.helperCommand(e.o, helperBin)
	}
	callCtx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	created, err := e.api.ContainerCreate(callCtx, cfg, hc, nil, nil, "agentbox-"+sb.sandboxID)
	cancel()
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("image %s is not on the daemon; build or pull it first: %w", p.image, err)
		}
		return e.unavailable(ctx, "create container", err)
	}
	sb.id = created.ID
	sb.logger.Debug("container created", "container", shortID(created.ID), "image", p.image)
	callCtx, cancel = context.WithTimeout(ctx, e.o.CallTimeout)
	err = e.api.ContainerStart(callCtx, created.ID, container.StartOptions{})
	cancel()
	if err != nil {
		return e.unavailable(ctx, "start container", err)
	}
	sb.docker = &dockerExec{
		api: e.api, containerID: created.ID, user: p.spec.User,
		stopGrace: e.o.StopGrace, callTimeout: e.o.CallTimeout, logger: sb.logger, stuck: sb.stop,
	}
	sb.runner = sb.docker
	if helperBin != "" {
		c, err := e.waitHelper(ctx, sb)
		if err != nil {
			return err
		}
		sb.helper = c
		sb.runner = helperRunner{c: c, sweep: sb.docker}
	}
	return e.waitReady(ctx, sb)
}

// discard removes what start or the pool made for sb when it does not
// become a sandbox: its container (when created) and its host dir.
func (e *Executor) discard(ctx context.Context, sb *Sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.CallTimeout)
	defer cancel()
	if sb.helper != nil {
		_ = sb.helper.Close()
	}
	if p := sb.init.Swap(nil); p != nil {
		p.close()
	}
	var rmErr error
	if sb.id != "" {
		rmErr = removeErrors(e.api.ContainerRemove(ctx, sb.id, container.RemoveOptions{Force: true}))
	}
	return errors.Join(rmErr, e.removeHostDir(sb.sandboxID))
}

// waitReady waits until a command runs in the container, and picks the OOM
// counter: the host's cgroup file when reachable, else a read by exec (that
// read is then the readiness probe).
func (e *Executor) waitReady(ctx context.Context, sb *Sandbox) error {
	callCtx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	defer cancel()
	if ins, err := e.api.ContainerInspect(callCtx, sb.id); err == nil && ins.State != nil {
		if f := hostCgroupFile(ins.State.Pid, sb.id); f != "" {
			sb.oom, sb.oomHost = hostOOMCounter{file: f}, true
			sb.init.Store(openInit(ins.State.Pid, sb.id))
			if !e.noHostKill {
				sb.docker.host = newHostKiller(f, e.o.StopGrace)
			}
		}
	}
	probe := func() error {
		code, out, err := sb.docker.simple(callCtx, []string{"true"}, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, out)
		}
		return err
	}
	if sb.helper != nil {
		// The helper answered, and it reports OOM kills itself.
		return nil
	}
	if !sb.oomHost {
		sb.oom = execOOMCounter{d: sb.docker}
		probe = func() error {
			n, err := sb.oom.count(callCtx)
			if errors.Is(err, errNoOOMCounter) {
				sb.oom = nil
				return nil
			}
			sb.lastOOM.Store(n)
			return err
		}
	}
	var err error
	for {
		if err = probe(); err == nil {
			return nil
		}
		if callCtx.Err() != nil {
			return fmt.Errorf("the container did not run a command within %v: %w", e.o.CallTimeout, err)
		}
		if errors.Is(err, executor.ErrNotRunning) {
			return fmt.Errorf("the container stopped right after start (does image %s have /bin/sh and sleep?): %w", sb.plan.image, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockChat creates the chat's lock file (chatLockName) and flocks it,
// waiting up to wait. The file must still be the one at the path once
// locked: the retention sweep deletes it, under the flock, with the chat.
func (e *Executor) lockChat(ctx context.Context, user, chat string, wait time.Duration) (*fileLock, error) {
	dir := filepath.Join(locksDir, user)
	if err := e.root.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	name := chatLockName(user, chat)
	deadline := time.Now().Add(max(wait, 0))
	for range 10 {
		f, err := e.root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("chat lock: %w", err)
		}
		l, err := lockFile(ctx, f, max(time.Until(deadline), 0))
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		if sameFile(f, e.root, name) {
			return l, nil
		}
		_ = l.Close()
	}
	return nil, fmt.Errorf("chat lock %s keeps changing (a retention sweep is removing the chat); retry: %w", name, executor.ErrBusy)
}

// locksDir holds the chats' lock files, {locksDir}/{user}/{chat}.lock,
// apart from the workspaces so that no chat id can name another's lock.
const locksDir = "locks"

// chatLockName is the chat's lock file under DataDir. Its mtime is the
// chat's last use (touched at each release), read by the retention sweep.
func chatLockName(user, chat string) string {
	return filepath.Join(locksDir, user, chat+".lock")
}

// legacyChatLockName is where versions before the locks directory kept the
// chat's lock, next to its workspace; the retention sweep removes them.
func legacyChatLockName(user, chat string) string {
	return filepath.Join(executor.LegacyWorkspacesDir, user, "chat-"+chat+".lock")
}

// touchChat records the chat's last use.
func (e *Executor) touchChat(user, chat string) {
	now := time.Now()
	if err := e.root.Chtimes(chatLockName(user, chat), now, now); err != nil {
		e.logger.Warn("cannot record the chat's last use", "user", user, "chat", chat, "error", err)
	}
}

// sandboxesDir holds the sandboxes' host dirs, {data}/sandboxes/{id}, with
// random ids (a container sees its host dir's path in mountinfo).
const sandboxesDir = "sandboxes"

// makeHostDir creates {data}/sandboxes/{id}, mode 0700, owned by the
// sandbox user.
func (e *Executor) makeHostDir(id string, uid, gid int) (string, error) {
	name := filepath.Join(sandboxesDir, id)
	if err := e.root.Mkdir(name, 0o700); err != nil {
		return "", fmt.Errorf("create host dir: %w", err)
	}
	if err := e.root.Lchown(name, uid, gid); err != nil && os.Geteuid() != uid {
		_ = e.root.Remove(name)
		return "", fmt.Errorf("chown host dir to %d:%d (run the gateway as root or as the sandbox user): %w", uid, gid, err)
	}
	return filepath.Join(e.o.DataDir, name), nil
}

// removeHostDir deletes {data}/sandboxes/{id} and what the helper left in
// it, and the sandbox's pool slot if it was pooled (on any instance).
func (e *Executor) removeHostDir(id string) error {
	if executor.ValidateID("sandbox id", id) != nil {
		return nil
	}
	if insts, err := dirNames(filepath.Join(e.o.DataDir, poolDir)); err == nil {
		for _, inst := range insts {
			e.releaseSlot(inst, id)
		}
	}
	if err := e.root.RemoveAll(filepath.Join(sandboxesDir, id)); err != nil {
		return fmt.Errorf("remove host dir: %w", err)
	}
	return nil
}

// holds reports whether a live lease of this executor holds sandbox id.
func (e *Executor) holds(sandboxID string) bool { return e.sandboxes.Holds(sandboxID) }

// Close stops the timers, closes the sandboxes still open, releases the
// instance lock and the Docker client. It is safe to call more than once.
func (e *Executor) Close() error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if !e.sandboxes.Shut() {
		return nil
	}
	close(e.stopBg)
	e.bgDone.Wait()
	// Pooled containers hold registry marks that CloseAll would wait for.
	errs := []error{e.pool.close()}
	// Creates under way finish first (and close what they made), so that
	// the client and the data dir are still open for them.
	n, err := e.sandboxes.CloseAll(context.Background())
	errs = append(errs, err)
	e.unmountImages()
	e.unmountSandboxesTmpfs()
	// Our lock file goes while we still hold it; reconcilers that look
	// afterwards find no file, which also means "gone".
	if err := e.root.Remove(instanceLockName(e.o.InstanceID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, e.inst.Close(), e.root.Close(), e.api.Close())
	e.logger.Debug("executor closed", "sandboxes_closed", n)
	return errors.Join(errs...)
}

// notRunning wraps Docker's "container gone or stopped" errors with
// executor.ErrNotRunning.
func notRunning(err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "is not running") || strings.Contains(err.Error(), "No such container") {
		return fmt.Errorf("%w: %w", executor.ErrNotRunning, err)
	}
	return err
}

// randomID returns 16 hex digits.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
