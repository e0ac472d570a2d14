package local

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// HealthError is what Check and New return when local mode cannot work on
// this host: every missing piece, each with what to do about it. It wraps
// executor.ErrUnavailable.
type HealthError struct {
	// Problems are one sentence each, e.g. "bubblewrap is not installed:
	// ...".
	Problems []string
}

func (e *HealthError) Error() string {
	return "local executor cannot start on this host:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// Unwrap makes errors.Is(err, executor.ErrUnavailable) hold.
func (e *HealthError) Unwrap() error { return executor.ErrUnavailable }

// maxUserNamespaces is the sysctl that caps user namespaces (0 forbids
// them for everyone).
var maxUserNamespaces = "/proc/sys/user/max_user_namespaces"

// probeTimeout bounds the sandbox start Check tries.
const probeTimeout = 20 * time.Second

// Check is the fail-fast health check of local mode, run by New: bwrap is
// installed, user namespaces are allowed (a real sandbox is started as the
// sandbox user to prove it), the helper binary is a static executable, and
// the agent CLIs in Options.Commands are on the host's PATH. It reports
// every problem at once in a *HealthError.
func Check(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	_, err = check(ctx, o)
	return err
}

// hostTools are the programs check found.
type hostTools struct {
	bwrap, prlimit string
}

// check runs the health check and returns the programs it found.
func check(ctx context.Context, o Options) (hostTools, error) {
	var problems []string
	bwrap, err := findBwrap(o.Bwrap)
	if err != nil {
		problems = append(problems, err.Error())
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		problems = append(problems, "prlimit is not installed (it sets the sandbox's rlimits): install Debian's util-linux package")
	}
	if os.Geteuid() == 0 {
		// The root launcher stages the mounts and drops to the sandbox uid.
		for _, tool := range []string{"mount", "setpriv"} {
			if _, err := exec.LookPath(tool); err != nil {
				problems = append(problems, tool+" is not installed (the launcher stages the sandbox's mounts with it as root): install Debian's util-linux and mount packages")
			}
		}
	}
	if err := checkHelper(o.HelperBinary); err != nil {
		problems = append(problems, err.Error())
	}
	for _, c := range o.Commands {
		if _, err := exec.LookPath(c); err != nil {
			problems = append(problems, fmt.Sprintf("the agent CLI %q is not on the host's PATH (%s): install it on the host, since local mode runs the host's programs (for claude: npm install -g @anthropic-ai/claude-code)", c, os.Getenv("PATH")))
		}
	}
	if b, err := os.ReadFile(maxUserNamespaces); err == nil && strings.TrimSpace(string(b)) == "0" {
		problems = append(problems, "user namespaces are disabled ("+maxUserNamespaces+" is 0): set the sysctl user.max_user_namespaces to a positive number, e.g. `sysctl -w user.max_user_namespaces=15000`")
	} else if bwrap != "" {
		if err := probe(ctx, bwrap, o); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return hostTools{}, &HealthError{Problems: problems}
	}
	return hostTools{bwrap: bwrap, prlimit: prlimit}, nil
}

// findBwrap resolves the bubblewrap binary.
func findBwrap(name string) (string, error) {
	if name == "" {
		name = "bwrap"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("bubblewrap is not installed (%s not found): install Debian's bubblewrap package (apt-get install bubblewrap) or set the bwrap path", name)
	}
	return p, nil
}

// checkHelper checks that the helper is a static executable (it runs in a
// sandbox whose /lib is the host's, but so does a copy built elsewhere).
func checkHelper(path string) error {
	if path == "" {
		return fmt.Errorf("no helper binary is configured: build it with `make helper` and pass bin/agentbox-helper (the helper is the sandbox's first process)")
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("the helper binary %s is not an executable file: build it with `make helper`", path)
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Errorf("the helper binary %s is not readable and executable by others (mode %v); the sandbox user must run it: chmod 0755 it", path, fi.Mode().Perm())
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("the helper binary %s is not a Linux executable (%w): build it with `make helper`", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("the helper binary %s is dynamically linked: build the static one with `make helper` (CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// probe starts the smallest sandbox with the namespaces and the user every
// sandbox gets, and explains a failure.
func probe(ctx context.Context, bwrap string, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	args := append(baseArgs(DefaultUID, DefaultGID), rootArgs(nil)...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--", "/bin/sh", "-c", "exit 0")
	cmd := exec.CommandContext(ctx, bwrap, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = sandboxCredential(DefaultUID, DefaultGID)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(stderr.String())
	who := "the sandbox user (uid " + strconv.Itoa(sandboxUID(DefaultUID)) + ")"
	switch {
	case strings.Contains(msg, "namespace") || strings.Contains(msg, "Operation not permitted") || strings.Contains(msg, "Permission denied"):
		return fmt.Errorf("user namespaces are not allowed for %s: bwrap said %q; allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 on Debian, kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04, or a container runtime that permits them)", who, msg)
	case ctx.Err() != nil:
		return fmt.Errorf("bwrap did not start a sandbox within %v: %w", probeTimeout, ctx.Err())
	}
	return fmt.Errorf("bwrap could not start a sandbox as %s: %w: %s", who, err, msg)
}

// sandboxUID is the host uid the sandbox runs as: uid when the gateway is
// root, else the gateway's own (an unprivileged process cannot pick another).
func sandboxUID(uid int) int {
	if os.Geteuid() == 0 {
		return uid
	}
	return os.Geteuid()
}

// sandboxCredential makes bwrap run as uid:gid on the host when the
// gateway is root, so that the user namespace maps the sandbox's id to the
// same unprivileged host id (never to root). Pdeathsig ends bwrap, and with
// it the sandbox, when the gateway dies.
func sandboxCredential(uid, gid int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	return a
}
