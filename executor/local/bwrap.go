package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// baseArgs are the namespace and process flags of every sandbox: all
// namespaces new (user, mount, pid, ipc, uts, cgroup, and net with only lo
// up), no further user namespaces inside, a new session (no TIOCSTI into
// the gateway's terminal), death with the parent, and the sandbox ids
// mapped to themselves.
func baseArgs(uid, gid int) []string {
	uid, gid = sandboxUID(uid), sandboxGID(gid)
	return []string{
		"--unshare-all",
		"--unshare-user",
		"--disable-userns",
		"--die-with-parent",
		"--new-session",
		"--uid", strconv.Itoa(uid), "--gid", strconv.Itoa(gid),
		"--hostname", "agentbox",
		"--cap-drop", "ALL",
	}
}

// sandboxGID is the host gid the sandbox runs as (see sandboxUID).
func sandboxGID(gid int) int {
	if os.Geteuid() == 0 {
		return gid
	}
	return os.Getegid()
}

// rootDirs are shown read-only from the host: the programs and their
// configuration. /bin, /lib and the like are links into /usr on merged-usr
// systems, and are then recreated as the same links.
var rootDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// rootArgs builds the read-only view of the host: rootDirs and extra, each
// at its own path, when it exists.
func rootArgs(extra []string) []string {
	var args []string
	for _, d := range append(append([]string(nil), rootDirs...), extra...) {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
			continue
		}
		args = append(args, "--ro-bind", d, d)
	}
	return args
}

// sandboxArgs is bwrap's whole command line for one sandbox of p.
func (e *Executor) sandboxArgs(p plan, src mountSources, infoFD, blockFD int) []string {
	o := e.o
	args := baseArgs(p.uid, p.gid)
	args = append(args, "--info-fd", strconv.Itoa(infoFD), "--block-fd", strconv.Itoa(blockFD))
	args = append(args, rootArgs(o.ReadOnlyPaths)...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--perms", "1777", "--size", strconv.FormatInt(o.TmpfsBytes, 10), "--tmpfs", "/tmp",
		"--dir", filepath.Dir(o.Home),
		"--perms", "0700", "--size", strconv.FormatInt(o.TmpfsBytes, 10), "--tmpfs", o.Home,
		"--dir", "/run",
		"--bind", src.hostDir, ContainerHostDir,
		"--ro-bind", src.helper, ContainerHelperPath,
		"--ro-bind", src.helper, ContainerToolsPath,
		"--bind", src.workspace, executor.ContainerWorkdir,
		"--chdir", executor.ContainerWorkdir,
		"--clearenv",
		"--setenv", "HOME", o.Home,
		"--setenv", "PATH", defaultPath,
		"--setenv", "USER", "agent",
		"--setenv", "TMPDIR", "/tmp",
	)
	for _, kv := range p.spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	args = append(args, "--")
	return append(args, helper.ServeArgs(ContainerHelperPath, helper.ServeOptions{
		Dir:       ContainerHostDir,
		Workdir:   executor.ContainerWorkdir,
		Deadline:  p.deadline,
		ModelPort: max(o.ModelPort, 0),
		KillGrace: o.StopGrace,
	})...)
}

// defaultPath is the sandbox's PATH: the helper's tools first, then the
// host's system directories (not /root's or the gateway user's).
const defaultPath = ContainerBinDir + ":/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
