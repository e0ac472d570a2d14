package executor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Environment is what an agent finds in a backend's sandboxes of one image
// and configuration: the OS and tools the image carries and the limits
// that apply (seed 003's environment snapshot). Backends capture it by
// running EnvironmentScript in a sandbox like every other; the middleware
// puts Summary in the agent's system prompt and the HTTP adapter shows it
// in GET /v1/models/{id}.
type Environment struct {
	// Mode names the backend and its isolation ("Docker container (runc)",
	// "local (bubblewrap)").
	Mode string `json:"mode"`
	// Image is the image the snapshot ran in and ImageID its content id
	// (empty for backends without images); a new ImageID under the same
	// name means a new snapshot.
	Image   string `json:"image,omitempty"`
	ImageID string `json:"image_id,omitempty"`
	// OS is /etc/os-release's PRETTY_NAME; Kernel is uname -r (the
	// sandbox's: gVisor reports its own).
	OS     string `json:"os"`
	Kernel string `json:"kernel"`
	Arch   string `json:"arch"`
	// Tools maps a program to its first version line; programs not on
	// the sandbox's PATH are absent.
	Tools map[string]string `json:"tools"`
	// Limits says which memory, CPU and process limits apply.
	Limits string `json:"limits"`
	// Network is what the sandbox can reach.
	Network string `json:"network"`
	// CapturedAt is when the snapshot was taken.
	CapturedAt time.Time `json:"captured_at"`
}

// EnvironmentProber is implemented by executors that can report what
// agents find in their sandboxes (executor/docker, executor/local).
type EnvironmentProber interface {
	// Environment returns the environment of sandboxes created from
	// spec's image and limits (its user, chat and assistant ids are
	// ignored). Implementations capture it once per image content and
	// configuration and return the stored snapshot after that.
	Environment(ctx context.Context, spec Spec) (Environment, error)
}

// environmentTools are the programs whose versions a snapshot reports,
// each with the argument that prints its version.
var environmentTools = [][2]string{
	{"claude", "--version"}, {"codex", "--version"}, {"cursor-agent", "--version"}, {"node", "--version"}, {"npm", "--version"},
	{"python3", "--version"}, {"pip3", "--version"}, {"git", "--version"}, {"go", "version"},
	{"curl", "--version"}, {"rg", "--version"}, {"make", "--version"}, {"gcc", "--version"},
	{"busybox", ""},
}

// EnvironmentScript is the /bin/sh script a backend runs in a sandbox to
// take a snapshot; ParseEnvironment reads what it prints ("key<TAB>value"
// lines). It only reads: uname, /etc/os-release and each tool's version.
func EnvironmentScript() string {
	var b strings.Builder
	b.WriteString(`if [ -r /etc/os-release ]; then . /etc/os-release; fi; printf 'os\t%s\n' "${PRETTY_NAME:-unknown (no /etc/os-release)}"; printf 'kernel\t%s\n' "$(uname -r)"; printf 'arch\t%s\n' "$(uname -m)"` + "\n")
	for _, t := range environmentTools {
		fmt.Fprintf(&b, "if command -v %[1]s >/dev/null 2>&1; then printf 'tool:%[1]s\\t%%s\\n' \"$(%[1]s %[2]s 2>&1 </dev/null | head -n 1)\"; fi\n", t[0], t[1])
	}
	return b.String()
}

// maxToolVersion bounds one tool's version text: the snapshot goes into
// every system prompt, and the image decides what the tools print.
const maxToolVersion = 80

// ParseEnvironment reads EnvironmentScript's output into the OS, kernel,
// arch and tool fields of an Environment; the caller fills in the rest.
// Lines it does not know are skipped, empty versions left out and long
// ones cut to their first three words.
func ParseEnvironment(out []byte) Environment {
	env := Environment{Tools: map[string]string{}, CapturedAt: time.Now().UTC()}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			continue
		}
		v = strings.Join(strings.Fields(v), " ")
		switch {
		case k == "os":
			env.OS = clip(v)
		case k == "kernel":
			env.Kernel = clip(v)
		case k == "arch":
			env.Arch = clip(v)
		case strings.HasPrefix(k, "tool:") && v != "":
			// The first three words say the version ("curl 7.88.1
			// (x86_64-pc-linux-gnu)"), not the build's feature list.
			if f := strings.Fields(v); len(f) > 3 {
				f = f[:3]
				if strings.HasPrefix(f[2], "(") && !strings.HasSuffix(f[2], ")") {
					f = f[:2] // "BusyBox v1.35.0 (Debian 1:1.35.0-4+b3)"
				}
				v = strings.Join(f, " ")
			}
			env.Tools[strings.TrimPrefix(k, "tool:")] = clip(v)
		}
	}
	return env
}

// clip bounds one field of the snapshot to maxToolVersion bytes.
func clip(s string) string {
	if len(s) > maxToolVersion {
		return strings.ToValidUTF8(s[:maxToolVersion], "")
	}
	return s
}

// Summary is a few lines for the agent's system prompt. It holds nothing
// that changes between snapshots of the same image (no capture time), so
// the prompt's bytes, and the model's prompt cache, stay the same across
// turns and gateway restarts.
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
	return fmt.Sprintf("Sandbox environment: %s on %s, kernel %s, %s.\nTools: %s.\nWorking directory: %s (persistent); HOME and /tmp are temporary.\nNetwork: %s. Limits: %s.",
		env.Mode, env.OS, env.Kernel, env.Arch, strings.Join(tools, ", "), ContainerWorkdir, env.Network, env.Limits)
}
