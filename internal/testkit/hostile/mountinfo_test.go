package hostile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/hostile"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
)

// requireRunsc skips unless the daemon has a "runsc" runtime; under CI it
// fails only when AGENTBOX_RUNSC=1 asked for it (.ci/setup registers it).
func requireRunsc(t *testing.T) {
	t.Helper()
	// The Docker SDK is executor/docker's alone; the CLI answers here.
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	require.NoError(t, err, "docker info")
	if strings.Contains(string(out), `"runsc"`) {
		return
	}
	msg := "the Docker daemon has no runsc runtime; install runsc and register it (AGENTBOX_RUNSC=1 .ci/setup)"
	if os.Getenv("CI") == "true" && os.Getenv("AGENTBOX_RUNSC") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestAttackReadHostPathsFromMounts is the "neutral paths" item of issue
// 14's finding 8: through the real CLI's Bash the agent reads everything
// that names its bind mounts' sources (mountinfo, mounts, every loop
// device's backing file in sysfs, the unix sockets it can see) looking for
// its user and chat ids and the host's data directory. Before neutral
// names, mountinfo showed {data}/workspaces/{user}/chat-{chat}, and sysfs
// every tenant's workspace image, {data}/quota/{user}/chat-{chat}.img.
//
// With loop-mounted workspace images (where the gateway can mount), no
// component of the data directory's path is visible either: the workspace
// is its own filesystem and the host dirs are on a tmpfs. With the
// watchdog, the ids are gone but the data directory's path within its
// filesystem still shows (see executor/docker's package doc).
func TestAttackReadHostPathsFromMounts(t *testing.T) {
	const user, chat = "u-mallory-7f3", "c-nightshade-42"
	probe := `cat /proc/self/mountinfo; echo ===; cat /proc/mounts; echo ===; ` +
		`for f in /sys/block/*/loop/backing_file /sys/devices/virtual/block/*/loop/backing_file; do echo "$f: $(cat $f 2>&1)"; done; echo ===; ` +
		`cat /proc/net/unix; echo ===; ls -la /run/agentbox /workspace; echo probe-done`
	for name, tc := range map[string]struct {
		quota       docker.QuotaMode
		runtime     string
		hideDataDir bool
		pool        bool
	}{
		"loop": {quota: docker.QuotaLoop, hideDataDir: true},
		// A started container from the pool (docker.Options.Pool), the
		// workspace bound into it through its slot on the pool's tmpfs.
		"loop+pool": {quota: docker.QuotaLoop, hideDataDir: true, pool: true},
		"watchdog":  {quota: docker.QuotaWatchdog},
		// gVisor, end to end: the real CLI, the helper's and the model
		// proxy's sockets, the workspace.
		"runsc": {quota: docker.QuotaWatchdog, runtime: "runsc"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.runtime == "runsc" {
				requireRunsc(t)
			}
			env := hostile.New(t, hostile.Options{
				Executor: func(o *docker.Options) {
					o.Quota = tc.quota
					if tc.pool {
						o.Pool = 1
					}
				},
				Assistants: []hostile.Assistant{{Configure: func(a *middleware.Assistant) {
					a.Sandbox.Spec.Runtime = tc.runtime
				}}},
			})
			// Another tenant's chat first: in loop mode its image is a loop
			// device whose backing file any container could read.
			other := env.Run(t, hostile.Turn{User: "u-victim-9c1", Chat: "c-victim-chat-77", Steps: []hostile.Step{hostile.Bash("echo hi > note")}})
			other.RequireOK(t)
			if tc.pool {
				testenv.WaitPooled(t, env.DataDir)
			}

			r := env.Run(t, hostile.Turn{User: user, Chat: chat, Steps: []hostile.Step{hostile.Bash(probe)}})
			r.RequireOK(t)
			require.True(t, r.Steps[0].Ran)
			out := r.Steps[0].Output
			require.Contains(t, out, "probe-done", "the probe ran to the end")
			require.Contains(t, out, " /workspace ", "mountinfo lists the workspace mount")
			if tc.runtime == "runsc" {
				require.NotNil(t, r.Init, "the CLI started under gVisor")
			}
			if tc.pool {
				assert.Regexp(t, `(?m)^.* / /workspace .*master:.*$`, out, "the workspace came into a pooled container by propagation")
			}
			t.Logf("what the agent read:\n%s", out)

			for _, id := range []string{user, chat, "mallory", "nightshade", "u-victim-9c1", "c-victim-chat-77", "victim"} {
				assert.NotContains(t, out, id, "a tenant id is visible in the container")
			}
			assert.NotContains(t, out, "chat-", "the legacy layout's names are gone")
			var distinctive []string
			for _, c := range strings.Split(env.DataDir, string(filepath.Separator)) {
				if len(c) >= 8 {
					distinctive = append(distinctive, c)
				}
			}
			require.NotEmpty(t, distinctive, "the data directory %s has a distinctive component to look for", env.DataDir)
			for _, c := range distinctive {
				if tc.hideDataDir {
					assert.NotContains(t, out, c, "the data directory's path is visible in the container")
				} else if strings.Contains(out, c) {
					t.Logf("watchdog mode: the data directory's path (%s) is visible, as documented", c)
				}
			}
		})
	}
}
