package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// PathHelper is ExecResult.Path: every command runs through the helper.
const PathHelper = "helper"

// Sandbox is one bubblewrap process tree over one chat's workspace.
type Sandbox struct {
	e       *Executor
	id      string
	hostDir string
	ws      *executor.Workspace
	// HostFS is ws: the host-side file API (ReadFile, WriteFile, ...).
	executor.HostFS
	plan   plan
	logger hclog.Logger
	cg     *sandboxCgroup
	client *helper.Client

	cmd     *exec.Cmd
	initPID int           // the pid namespace's init (bwrap's child), host pid
	exited  chan struct{} // closed when bwrap has exited
	timer   *time.Timer   // kills the tree at the deadline if the helper did not end it

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	release   func()
}

var (
	_ executor.Sandbox = (*Sandbox)(nil)
	_ executor.FS      = (*Sandbox)(nil)
)

// bwrapInfo is what bwrap writes to --info-fd.
type bwrapInfo struct {
	ChildPID int `json:"child-pid"`
}

// start prepares the workspace and host dir and starts bwrap, held on its
// block fd until its init is in the sandbox's cgroups and has the rlimits,
// so that every process of the sandbox is born inside them.
func (e *Executor) start(ctx context.Context, p plan, id string, logger hclog.Logger) (_ *Sandbox, err error) {
	wsDir, err := executor.PrepareWorkspace(e.o.DataDir, p.spec.UserID, p.spec.ChatID, p.uid, p.gid)
	if err != nil {
		return nil, err
	}
	wsOpts := e.o.Workspace
	wsOpts.UID, wsOpts.GID = p.uid, p.gid
	ws, err := executor.OpenWorkspace(wsDir, wsOpts)
	if err != nil {
		return nil, err
	}
	hostDir, err := e.makeHostDir(id, p.uid, p.gid)
	if err != nil {
		return nil, errors.Join(err, ws.Close())
	}
	sb := &Sandbox{e: e, id: id, hostDir: hostDir, ws: ws, HostFS: ws, plan: p, logger: logger.With("sandbox", id), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			sb.kill()
			if sb.cmd != nil {
				<-sb.exited
			}
			if cerr := errors.Join(sb.cg.remove(), ws.Close(), e.removeHostDir(id)); cerr != nil {
				logger.Error("cleanup after failed create", "error", cerr)
			}
		}
	}()
	sb.cg, err = e.cgroups.create(cgroupName(id), limits{memory: p.spec.MemoryBytes, cpus: p.spec.CPUs, pids: p.spec.PidsLimit})
	if err != nil {
		return nil, err
	}

	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer func() { _ = infoR.Close() }()
	blockR, blockW, err := os.Pipe()
	if err != nil {
		_ = infoW.Close()
		return nil, err
	}
	defer func() { _ = blockW.Close() }()
	// ExtraFiles[i] is descriptor 3+i in bwrap.
	src := mountSources{workspace: wsDir, hostDir: hostDir, helper: e.helperBin}
	staged := os.Geteuid() == 0
	if staged {
		src = mountSources{workspace: stageDir + "/workspace", hostDir: stageDir + "/run", helper: stageDir + "/bin/agentbox-helper"}
	}
	args := append(e.rlimitArgs(p), "--", e.bwrap)
	args = append(args, e.sandboxArgs(p, src, 3, 4)...)
	cmd := exec.Command(e.prlimit, args...)
	if staged {
		cmd = exec.Command("/bin/sh", append([]string{"-c", launchScript, "agentbox-launch",
			wsDir, hostDir, e.helperBin, stageDir, strconv.Itoa(p.uid), strconv.Itoa(p.gid), e.prlimit}, args...)...)
	}
	cmd.ExtraFiles = []*os.File{infoW, blockR}
	if staged {
		dirs, err := e.openDirs(wsDir, hostDir)
		if err != nil {
			_ = infoW.Close()
			_ = blockR.Close()
			return nil, err
		}
		defer func() {
			for _, f := range dirs {
				_ = f.Close()
			}
		}()
		cmd.ExtraFiles = append(cmd.ExtraFiles, dirs...)
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if staged {
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr // bwrap's own errors; the helper's go nowhere else
	err = cmd.Start()
	_ = infoW.Close()
	_ = blockR.Close()
	if err != nil {
		return nil, fmt.Errorf("start bwrap: %w", err)
	}
	sb.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(sb.exited)
	}()
	var info bwrapInfo
	dec := json.NewDecoder(infoR)
	if err := dec.Decode(&info); err != nil || info.ChildPID <= 0 {
		<-sb.exited
		if err == nil {
			err = errors.New("no child pid in its info")
		}
		return nil, fmt.Errorf("bwrap did not start the sandbox: %s (%w)", strings.TrimSpace(stderr.String()), err)
	}
	sb.initPID = info.ChildPID
	if err := sb.cg.add(cmd.Process.Pid, info.ChildPID); err != nil {
		return nil, err
	}
	if _, err := blockW.Write([]byte{1}); err != nil {
		return nil, fmt.Errorf("release the sandbox: %w (bwrap: %s)", err, strings.TrimSpace(stderr.String()))
	}
	sb.timer = time.AfterFunc(time.Until(p.deadline)+e.o.StopGrace+time.Second, sb.kill)

	waitCtx, cancel := context.WithTimeoutCause(ctx, e.o.StartTimeout, fmt.Errorf("the helper did not answer within %v", e.o.StartTimeout))
	defer cancel()
	go func() {
		select {
		case <-sb.exited:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	c, err := helper.WaitReady(waitCtx, hostDir)
	if err != nil {
		select {
		case <-sb.exited:
			return nil, fmt.Errorf("the sandbox ended before its helper answered: bwrap: %s: %w", strings.TrimSpace(stderr.String()), executor.ErrNotRunning)
		default:
		}
		if cause := context.Cause(waitCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, fmt.Errorf("%w (%w)", cause, err)
		}
		return nil, err
	}
	sb.client = c
	return sb, nil
}

// stageDir is where, as root, the launcher shows the sandbox's mount
// sources in a private mount namespace of its own (a tmpfs over this
// directory), because bwrap runs as the sandbox user and cannot reach them
// at their own paths: the data directory is 0700 and may sit below /root.
const stageDir = "/run/agentbox-local"

// launchScript runs as root in a new mount namespace whose mounts are
// private: it binds the workspace ($1), the host dir ($2) and the helper
// ($3) into a tmpfs at $4, then becomes the sandbox user and execs the
// rest of its arguments (prlimit ... bwrap ...). Nothing of it is visible
// in the gateway's mount namespace, and it all goes with the sandbox.
// mount binds by path, so each bound directory is then checked to be the
// very one the gateway opened below the data directory without following
// links (descriptors 5 and 6): a link swapped in on the way fails the start.
const launchScript = `set -e
ws=$1 host=$2 helper=$3 stage=$4 uid=$5 gid=$6
shift 6
mount -t tmpfs -o mode=0755,size=1m agentbox-stage "$stage"
mkdir "$stage/workspace" "$stage/run" "$stage/bin"
: > "$stage/bin/agentbox-helper"
mount --bind "$ws" "$stage/workspace"
mount --bind "$host" "$stage/run"
mount --bind "$helper" "$stage/bin/agentbox-helper"
same() { [ "$(stat -c %d:%i "$1")" = "$(stat -L -c %d:%i "$2")" ] || { echo "agentbox: $1 is not the directory the gateway opened; refusing to start" >&2; exit 1; }; }
same "$stage/workspace" /proc/self/fd/5
same "$stage/run" /proc/self/fd/6
exec 5<&- 6<&-
exec setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all -- "$@"
`

// openDirs opens the workspace and the host dir, both below the data
// directory, through its os.Root and without following a link at the end.
func (e *Executor) openDirs(dirs ...string) ([]*os.File, error) {
	var out []*os.File
	for _, d := range dirs {
		rel, err := filepath.Rel(e.o.DataDir, d)
		if err == nil && !filepath.IsLocal(rel) {
			err = fmt.Errorf("not below %s", e.o.DataDir)
		}
		var f *os.File
		if err == nil {
			f, err = e.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
		}
		if err != nil {
			for _, f := range out {
				_ = f.Close()
			}
			return nil, fmt.Errorf("open %s for the sandbox: %w", d, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// mountSources are the paths bwrap binds from: staged ones when the
// gateway is root, else the real ones (bwrap then runs as the gateway's
// user, who can reach them).
type mountSources struct {
	workspace, hostDir, helper string
}

// rlimitArgs are prlimit(1)'s options for the sandbox: open files, core
// dumps off, the largest file (the workspace's disk quota, as a per-file
// cap) and, without a pids cgroup, the process count of the sandbox uid.
// prlimit lowers its own limits and execs bwrap, so every process of the
// sandbox inherits them; setting them on bwrap's pid from the gateway
// would need CAP_SYS_RESOURCE, which a gateway in a container may lack.
func (e *Executor) rlimitArgs(p plan) []string {
	args := []string{
		fmt.Sprintf("--nofile=%d:%d", DefaultNofile, DefaultNofile),
		"--core=0:0",
		fmt.Sprintf("--fsize=%d:%d", p.spec.DiskBytes, p.spec.DiskBytes),
	}
	if !e.cgroups.has("pids") {
		// Counted over every process of the uid on the host, so sandboxes
		// sharing the uid share it.
		args = append(args, fmt.Sprintf("--nproc=%d:%d", p.spec.PidsLimit, p.spec.PidsLimit))
	}
	return args
}

// kill ends the whole tree: SIGKILL to the pid namespace's init takes every
// process of the namespace with it; bwrap then exits.
func (s *Sandbox) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	if s.initPID > 0 {
		_ = syscall.Kill(s.initPID, syscall.SIGKILL)
	}
	_ = s.cmd.Process.Kill()
}

// ID is the sandbox's id (also its host directory's name).
func (s *Sandbox) ID() string { return s.id }

// Workdir is executor.ContainerWorkdir.
func (s *Sandbox) Workdir() string { return executor.ContainerWorkdir }

// HostDir is {data}/sandboxes/{id}, shown at ContainerHostDir; the helper
// puts its sockets there.
func (s *Sandbox) HostDir() string { return s.hostDir }

// ModelBaseURL is where the agent CLI reaches the model inside the sandbox
// (the helper's relay to {HostDir}/model.sock), or "" with the relay off.
func (s *Sandbox) ModelBaseURL() string {
	if s.e.o.ModelPort <= 0 {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d", s.e.o.ModelPort)
}

// ExecPath is PathHelper.
func (s *Sandbox) ExecPath() string { return PathHelper }

// Deadline is when the sandbox ends by itself.
func (s *Sandbox) Deadline() time.Time { return s.plan.deadline }

// PID is the host pid of the sandbox's init (its pid namespace's pid 1).
func (s *Sandbox) PID() int { return s.initPID }

// Exec runs cmd in the sandbox through the helper and waits for it. A
// stopped command (Cmd.Timeout, ctx, output over Cmd.MaxOutput) has its
// process group killed by the helper. OOMKilled reports that the sandbox's
// memory cgroup saw an OOM kill while it ran (never, without a memory
// cgroup).
func (s *Sandbox) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	if cmd == nil || len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return executor.ExecResult{}, fmt.Errorf("exec: empty argv; set Cmd.Args[0] to the program: %w", executor.ErrInvalid)
	}
	if s.closed.Load() {
		return executor.ExecResult{}, fmt.Errorf("exec %q: sandbox %s: %w", cmd.Args[0], s.id, executor.ErrNotRunning)
	}
	if s.gone() {
		return executor.ExecResult{}, fmt.Errorf("exec %q: sandbox %s: %w", cmd.Args[0], s.id, executor.ErrSandboxGone)
	}
	c, err := cmd.Prepare(s.Workdir(), s.e.o.ExecTimeout, s.e.o.MaxOutput, s.plan.deadline)
	if err != nil {
		return executor.ExecResult{}, err
	}
	before := s.cg.oomKills()
	res, err := s.client.Exec(ctx, &c)
	res.Path = PathHelper
	if after := s.cg.oomKills(); before >= 0 && after > before {
		res.OOMKilled = true
	}
	if err != nil && ctx.Err() == nil && !s.closed.Load() && s.goneWithin(time.Second) {
		return res, fmt.Errorf("exec %q: %w (%w)", c.Args[0], executor.ErrSandboxGone, err)
	}
	if err != nil {
		s.logger.Debug("exec failed", "args", c.Args, "exit", res.ExitCode, "duration", res.Duration, "error", err)
	}
	return res, err
}

// gone reports whether bwrap has exited.
func (s *Sandbox) gone() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// goneWithin waits up to d for bwrap to exit.
func (s *Sandbox) goneWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.exited:
		return true
	case <-t.C:
		return false
	}
}

// Close kills the sandbox's process tree, removes its cgroup and host
// directory and releases the chat. The workspace stays. It is safe to call
// more than once (later calls return the first result).
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.client != nil {
			_ = s.client.Close()
		}
		s.kill()
		var errs []error
		t := time.NewTimer(s.e.o.StopGrace + 10*time.Second)
		select {
		case <-s.exited:
		case <-t.C:
			errs = append(errs, fmt.Errorf("bwrap (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid))
		}
		t.Stop()
		errs = append(errs, s.cg.remove(), s.ws.Close(), s.e.removeHostDir(s.id))
		s.e.sandboxes.Forget(s.id)
		s.release()
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close sandbox %s: %w", s.id, err)
			s.logger.Error("sandbox close failed", "error", s.closeErr)
		}
	})
	return s.closeErr
}

// lockedBuffer keeps bwrap's stderr (bounded) for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 64<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*lockedBuffer)(nil)
