package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Environment is what an agent finds in this executor's sandboxes: the
// host's OS and tools (local mode shows the host's /usr), and the limits
// that apply. Summary renders it for the agent's system prompt.
type Environment struct {
	// Mode is "local (bubblewrap)".
	Mode string `json:"mode"`
	// OS is /etc/os-release's PRETTY_NAME; Kernel is uname -r.
	OS     string `json:"os"`
	Kernel string `json:"kernel"`
	Arch   string `json:"arch"`
	// Tools maps a program to its first version line; programs not on
	// the sandbox's PATH are absent.
	Tools map[string]string `json:"tools"`
	// Limits names how memory, CPU and pids are enforced.
	Limits string `json:"limits"`
	// Network is what the sandbox can reach.
	Network string `json:"network"`
	// CapturedAt is when the snapshot was taken.
	CapturedAt time.Time `json:"captured_at"`
}

// snapshotTools are the programs whose versions the snapshot reports,
// each with the argument that prints its version.
var snapshotTools = [][2]string{
	{"claude", "--version"}, {"node", "--version"}, {"npm", "--version"},
	{"python3", "--version"}, {"git", "--version"}, {"go", "version"},
	{"curl", "--version"}, {"rg", "--version"}, {"make", "--version"}, {"gcc", "--version"},
}

// snapshotScript prints "key<TAB>value" lines from inside a sandbox.
func snapshotScript() string {
	var b strings.Builder
	b.WriteString(`. /etc/os-release 2>/dev/null; printf 'os\t%s\n' "${PRETTY_NAME:-unknown}"; printf 'kernel\t%s\n' "$(uname -r)"; printf 'arch\t%s\n' "$(uname -m)"` + "\n")
	for _, t := range snapshotTools {
		fmt.Fprintf(&b, "if command -v %[1]s >/dev/null 2>&1; then printf 'tool:%[1]s\\t%%s\\n' \"$(%[1]s %[2]s 2>&1 </dev/null | head -n 1)\"; fi\n", t[0], t[1])
	}
	return b.String()
}

// snapshotTimeout bounds the snapshot's sandbox.
const snapshotTimeout = 30 * time.Second

// Environment captures the sandboxes' environment once, in a sandbox with
// the same root view, user and namespaces as every other (and no
// workspace); later calls return the first result. Call it at start-up
// and put Summary in the agents' system prompt.
func (e *Executor) Environment(ctx context.Context) (Environment, error) {
	e.envOnce.Do(func() { e.env, e.envErr = e.captureEnvironment(ctx) })
	return e.env, e.envErr
}

func (e *Executor) captureEnvironment(ctx context.Context) (Environment, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	args := append(baseArgs(DefaultUID, DefaultGID), rootArgs(e.o.ReadOnlyPaths)...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", e.o.Home, "--chdir", "/tmp",
		"--clearenv", "--setenv", "PATH", defaultPath, "--setenv", "HOME", e.o.Home,
		"--", "/bin/sh", "-c", snapshotScript())
	cmd := exec.CommandContext(ctx, e.bwrap, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = sandboxCredential(DefaultUID, DefaultGID)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Environment{}, fmt.Errorf("local executor: environment snapshot: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	env := parseEnvironment(out)
	env.Limits = e.Limits()
	return env, nil
}

// parseEnvironment reads snapshotScript's output.
func parseEnvironment(out []byte) Environment {
	env := Environment{Mode: "local (bubblewrap)", Tools: map[string]string{}, Arch: runtime.GOARCH,
		Network: "none (loopback only; the model through the gateway)", CapturedAt: time.Now().UTC()}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch {
		case k == "os":
			env.OS = v
		case k == "kernel":
			env.Kernel = v
		case k == "arch":
			env.Arch = v
		case strings.HasPrefix(k, "tool:") && v != "":
			// The first three words say the version ("curl 7.88.1
			// (x86_64-pc-linux-gnu)"), not the build's feature list.
			if f := strings.Fields(v); len(f) > 3 {
				v = strings.Join(f[:3], " ")
			}
			env.Tools[strings.TrimPrefix(k, "tool:")] = v
		}
	}
	return env
}

// Summary is a few lines for the agent's system prompt.
func (env Environment) Summary() string {
	names := make([]string, 0, len(env.Tools))
	for n := range env.Tools {
		names = append(names, n)
	}
	sort.Strings(names)
	tools := make([]string, 0, len(names))
	for _, n := range names {
		tools = append(tools, n+" ("+env.Tools[n]+")")
	}
	if len(tools) == 0 {
		tools = append(tools, "none of the usual ones found")
	}
	return fmt.Sprintf("Sandbox environment: %s on %s, kernel %s, %s.\nTools: %s.\nWorking directory: /workspace (persistent); HOME and /tmp are temporary.\nNetwork: %s. Limits: %s.",
		env.Mode, env.OS, env.Kernel, env.Arch, strings.Join(tools, ", "), env.Network, env.Limits)
}

// EnvironmentSummary is Environment's Summary: the few lines a gateway
// puts in the agent's system prompt. Its shape, a method returning text,
// lets the middleware offer it without importing this package.
func (e *Executor) EnvironmentSummary(ctx context.Context) (string, error) {
	env, err := e.Environment(ctx)
	if err != nil {
		return "", err
	}
	return env.Summary(), nil
}
