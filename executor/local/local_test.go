package local_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// requireBwrap skips (locally) or fails (CI=true) without bubblewrap.
func requireBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if testenv.InCI() {
			t.Fatalf("CI=true and bubblewrap is not installed; .ci/setup installs it")
		}
		t.Skip("bubblewrap is not installed (apt-get install bubblewrap; set CI=true to make this a failure)")
	}
}

func testLogger(t testing.TB) hclog.Logger {
	if os.Getenv("AGENTBOX_TEST_LOG") == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: os.Stderr})
}

// newExecutor starts a local executor on a fresh data dir.
func newExecutor(t testing.TB, mutate ...func(*local.Options)) *local.Executor {
	t.Helper()
	requireBwrap(t)
	testenv.RequireRoot(t, "mapping the sandbox to uid 100000")
	o := local.Options{
		DataDir:      t.TempDir(),
		HelperBinary: testenv.HelperBinary(t),
		Commands:     []string{},
		Logger:       testLogger(t),
		StopGrace:    500 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&o)
	}
	e, err := local.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	return e
}

func testSpec(chat string) executor.Spec {
	return executor.Spec{
		UserID: "u1", ChatID: chat, AssistantID: "tester",
		MemoryBytes: 256 << 20, CPUs: 1, PidsLimit: 128,
		Timeout: 2 * time.Minute, LeaseWait: 30 * time.Second,
	}
}

func create(t testing.TB, e *local.Executor, spec executor.Spec) *local.Sandbox {
	t.Helper()
	sb, err := e.Create(context.Background(), spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb.(*local.Sandbox)
}

// run execs a shell script and returns stdout, stderr and the result.
func run(t testing.TB, sb executor.Sandbox, script string) (string, string, executor.ExecResult, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
	return out.String(), errb.String(), res, err
}

func TestConformance(t *testing.T) {
	executortest.RunConformance(t, func(t *testing.T) executor.Executor {
		return newExecutor(t)
	}, executor.Spec{MemoryBytes: 256 << 20, PidsLimit: 128, Timeout: 5 * time.Minute})
}

// TestSandboxIdentity: the sandbox runs as uid 100000 on the host too, in
// its own pid namespace with the helper under bwrap's init, and the files
// it writes are the sandbox uid's.
func TestSandboxIdentity(t *testing.T) {
	e := newExecutor(t)
	sb := create(t, e, testSpec("identity"))
	out, errOut, res, err := run(t, sb, `id -u; id -g; cat /proc/self/uid_map; echo $$; ps -o pid=,args= -p 1,2 2>/dev/null || cat /proc/2/cmdline | tr '\0' ' '; touch made-here`)
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 4, out)
	assert.Equal(t, "100000", lines[0])
	assert.Equal(t, "100000", lines[1])
	// bwrap nests a second user namespace for --disable-userns, so the map
	// read inside is relative to the outer one; the host's view is below.
	assert.Contains(t, out, local.ContainerHelperPath, "the helper runs inside the pid namespace")

	// On the host, the sandbox's init runs as uid 100000.
	status, err := os.ReadFile("/proc/" + itoa(sb.PID()) + "/status")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^Uid:\s+100000\s+100000\s+100000\s+100000$`, string(status))
	fi, err := sb.Stat(context.Background(), "made-here")
	require.NoError(t, err)
	assert.False(t, fi.IsDir)
}

// TestAttacks: what an agent in local mode tries, and is refused.
func TestAttacks(t *testing.T) {
	secretDir := t.TempDir() // where another workspace stands in
	e := newExecutor(t)
	victim := create(t, e, testSpec("victim"))
	require.NoError(t, victim.WriteFile(context.Background(), "secret.txt", []byte("victim-secret-7c1")))
	require.NoError(t, os.WriteFile(secretDir+"/host-secret", []byte("host-secret-91b"), 0o644))
	sb := create(t, e, testSpec("attacker"))

	// A host process the attacker must not be able to signal.
	sleeper := exec.Command("sleep", "3131")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	for _, tc := range []struct {
		name   string
		script string
		// leaked must not appear on the script's stdout (its stderr names
		// what was refused).
		leaked string
	}{
		{"read /root", `ls -a /root; cat /root/.bashrc /root/.profile`, ".bashrc"},
		{"read the data dir", `ls ` + e.DataDirForTest() + `/workspaces/u1; cat ` + e.DataDirForTest() + `/workspaces/u1/chat-victim/secret.txt`, "victim-secret"},
		{"find another workspace", `find / -name secret.txt -o -name host-secret 2>/dev/null | xargs cat 2>/dev/null`, "secret-"},
		{"read a host temp dir", `cat ` + secretDir + `/host-secret`, "host-secret-91b"},
		{"see host processes", `ls /proc | grep -x ` + itoa(sleeper.Process.Pid) + `; ps ax 2>/dev/null | grep 'sleep 31[3]1'; cat /proc/[0-9]*/cmdline | tr '\0' ' '`, "sleep 3131"},
		{"kill a host process", `kill -9 ` + itoa(sleeper.Process.Pid) + ` && echo killed-it`, "killed-it"},
		{"reach the network", `(exec 3<>/dev/tcp/1.1.1.1/80) 2>&1; wget -T 2 -q -O- http://example.com 2>&1; curl -sS -m 2 http://10.0.0.1 2>&1; cat /proc/net/dev | awk 'NR>2{print $1}'`, "eth0"},
		{"reach host loopback services", `curl -sS -m 2 http://127.0.0.1:22 2>&1; (exec 3<>/dev/tcp/127.0.0.1/22 && echo connected-22) 2>&1`, "connected-22"},
		{"reach the docker socket", `ls -l /var/run/docker.sock /run/docker.sock 2>&1; curl -sS --unix-socket /var/run/docker.sock http://x/containers/json 2>&1`, "Id\""},
		{"become root", `unshare -r id 2>&1; su -c id 2>&1 </dev/null; echo uid=$(id -u)`, "uid=0"},
		{"read /etc/shadow", `cat /etc/shadow 2>&1`, "root:"},
		{"reach another sandbox's sockets", `n=$(find / -name exec.sock 2>/dev/null | wc -l); [ "$n" -gt 1 ] && echo found-more $n; true`, "found-more"},
		{"write the host's /usr", `touch /usr/bin/pwned 2>&1 && echo wrote-usr`, "wrote-usr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, _, err := run(t, sb, tc.script)
			require.NoError(t, err)
			assert.NotContains(t, out, tc.leaked, "stdout: %s\nstderr: %s", out, errOut)
		})
	}
	assert.Nil(t, sleeper.ProcessState, "the host process is still running")
	require.NoError(t, sleeper.Process.Signal(syscallZero()), "the host process is still running")
	_, err := os.Stat("/usr/bin/pwned")
	assert.True(t, os.IsNotExist(err))
}

// TestCloseKillsTheTree: a process that left the command's group
// (setsid, nohup) still dies with the sandbox.
func TestCloseKillsTheTree(t *testing.T) {
	e := newExecutor(t)
	sb := create(t, e, testSpec("tree"))
	out, errOut, res, err := run(t, sb, `setsid sh -c 'sleep 3271' >/dev/null 2>&1 < /dev/null & sleep 0.2; pgrep -f 'sleep 327[1]' | head -1`)
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, errOut)
	require.NotEmpty(t, strings.TrimSpace(out))
	hostPIDs := hostPIDsOf(t, "sleep 3271", 100000)
	require.NotEmpty(t, hostPIDs, "the escapee runs on the host as uid 100000")
	require.NoError(t, sb.Close(context.Background()))
	for _, pid := range hostPIDs {
		assert.True(t, processGone(pid), "pid %d survived Close", pid)
	}
}

// TestLimits: the cgroup limits, when the cgroup filesystem is writable,
// stop a memory bomb (OOMKilled) and a fork bomb.
func TestLimits(t *testing.T) {
	requireBwrap(t)
	testenv.RequireRoot(t, "cgroups and uid 100000")
	probe, err := local.New(context.Background(), local.Options{DataDir: t.TempDir(), HelperBinary: testenv.HelperBinary(t), Commands: []string{}, Cgroups: local.CgroupRequire})
	if err != nil {
		// A kernel setting, not a missing install: say so and skip.
		require.ErrorContains(t, err, "no writable cgroup")
		t.Skipf("this host gives no writable cgroup, so local mode runs with rlimits only: %v", err)
	}
	require.NoError(t, probe.Close())
	e := newExecutor(t, func(o *local.Options) { o.Cgroups = local.CgroupRequire })
	t.Logf("limits: %s", e.Limits())
	spec := testSpec("limits")
	spec.MemoryBytes = 64 << 20
	// The pids cgroup counts threads, the helper's too (a Go program
	// starts more of them on a loaded machine): leave the bomb room to
	// start.
	spec.PidsLimit = 64
	sb := create(t, e, spec)

	// A fork bomb: count its processes from the host while it runs.
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), &executor.Cmd{
			// The subshell dies at the first fork pids.max refuses; the
			// command then holds its bomb until the timeout with exec
			// (no fork), so the host sees it even on a loaded machine.
			Args:    []string{"sh", "-c", `(i=0; while [ $i -lt 200 ]; do sleep 4242 & i=$((i+1)); done) 2>/dev/null; exec sleep 4242`},
			Timeout: 5 * time.Second,
		})
		done <- err
	}()
	var most int
	require.Eventually(t, func() bool {
		most = max(most, len(hostPIDsOf(t, "sleep 4242", 100000)))
		return most > 5
	}, 20*time.Second, 50*time.Millisecond, "the bomb starts")
	time.Sleep(time.Second)
	most = max(most, len(hostPIDsOf(t, "sleep 4242", 100000)))
	assert.Less(t, most, 64, "processes capped by pids.max")
	// sh gives up when fork fails, or the timeout ends it; either way the
	// helper kills what the command left in its group.
	if err := <-done; err != nil {
		t.Logf("the bomb ended with %v", err)
	}
	assert.Empty(t, hostPIDsOf(t, "sleep 4242", 100000), "the timed-out bomb is gone")

	_, _, res, err := run(t, sb, `head -c 200m /dev/zero | tail > /dev/null`)
	require.NoError(t, err)
	assert.True(t, res.OOMKilled, "a 200 MiB buffer in a 64 MiB sandbox is OOM-killed: %+v", res)

	out, _, _, err := run(t, sb, `ulimit -n`)
	require.NoError(t, err)
	assert.Equal(t, itoa(local.DefaultNofile), strings.TrimSpace(out))
}

// TestDeadline: the sandbox ends at its deadline even with nobody calling.
func TestDeadline(t *testing.T) {
	e := newExecutor(t)
	spec := testSpec("deadline")
	spec.Timeout = 2 * time.Second
	sb := create(t, e, spec)
	pid := sb.PID()
	require.Eventually(t, func() bool { return processGone(pid) }, 30*time.Second, 100*time.Millisecond)
	_, _, _, err := run(t, sb, "true")
	require.Error(t, err)
	assert.True(t, errors.Is(err, executor.ErrNotRunning) || errors.Is(err, executor.ErrTimeout), "past the deadline: %v", err)
}

func TestSpecRefusals(t *testing.T) {
	e := newExecutor(t)
	for name, mut := range map[string]func(*executor.Spec){
		"network": func(s *executor.Spec) { s.Network = "bridge" },
		"runtime": func(s *executor.Spec) { s.Runtime = "runsc" },
		"root":    func(s *executor.Spec) { s.User = "0:0" },
		"pids":    func(s *executor.Spec) { s.PidsLimit = 2 },
		"chat id": func(s *executor.Spec) { s.ChatID = "../x" },
		"egress":  func(s *executor.Spec) { s.Egress = true },
		"inodes":  func(s *executor.Spec) { s.Inodes = 5000 },
	} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec("refused")
			mut(&spec)
			_, err := e.Create(context.Background(), spec)
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	}
}

// TestEnvironment: the snapshot reports what a command in a sandbox sees.
func TestEnvironment(t *testing.T) {
	e := newExecutor(t)
	env, err := e.Environment(context.Background(), executor.Spec{})
	require.NoError(t, err)
	sb := create(t, e, testSpec("env"))
	out, _, _, err := run(t, sb, `. /etc/os-release; echo "$PRETTY_NAME"; uname -r; git --version | head -1`)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.Equal(t, lines[0], env.OS)
	assert.Equal(t, lines[1], env.Kernel)
	assert.Equal(t, lines[2], env.Tools["git"])
	assert.Equal(t, e.Limits(), env.Limits)
	sum := env.Summary()
	assert.Contains(t, sum, env.OS)
	assert.Contains(t, sum, "git ("+lines[2]+")")
	again, err := e.Environment(context.Background(), executor.Spec{})
	require.NoError(t, err)
	assert.Equal(t, env.CapturedAt, again.CapturedAt, "captured once")
	t.Logf("summary:\n%s", sum)
}
