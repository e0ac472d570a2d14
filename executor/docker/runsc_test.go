package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// requireRunsc skips unless the daemon has a "runsc" runtime; under CI it
// fails only when AGENTBOX_RUNSC=1 asked for it (.ci/setup registers it).
func requireRunsc(t testing.TB) {
	t.Helper()
	testenv.RequireImage(t)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	info, err := cli.Info(context.Background())
	require.NoError(t, err)
	if _, ok := info.Runtimes["runsc"]; ok {
		return
	}
	msg := "the Docker daemon has no runsc runtime; install runsc and register it (AGENTBOX_RUNSC=1 .ci/setup)"
	if os.Getenv("CI") == "true" && os.Getenv("AGENTBOX_RUNSC") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func runscSpec(chat string) executor.Spec {
	s := testSpec(chat)
	s.Runtime = "runsc"
	return s
}

// TestRunscEndToEnd: with Spec.Runtime "runsc" (gVisor) the executor's
// whole path works: the helper's socket across the sandbox boundary, exec
// with output and exit codes, a kill that stops a running command, the
// workspace shared both ways, and the kernel the agent sees is gVisor's.
func TestRunscEndToEnd(t *testing.T) {
	requireRunsc(t)
	bin := testenv.HelperBinary(t)
	e := newTestExecutor(t, func(o *Options) { o.HelperBinary = bin })
	sb := create(t, e, runscSpec("runsc"))
	require.Equal(t, PathHelper, sb.runner.path(), "commands go over the helper's socket")

	out, _, res, err := run(t, sb, "dmesg 2>/dev/null | head -1; uname -r; echo err >&2; exit 3")
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
	assert.Contains(t, out, "gVisor", "the agent runs on gVisor's kernel")

	require.NoError(t, os.WriteFile(filepath.Join(sb.ws.Dir(), "from-host"), []byte("hi"), 0o644))
	assert.Equal(t, "hi", mustRun(t, sb, "cat /workspace/from-host"))
	mustRun(t, sb, "echo back > /workspace/from-sandbox")
	b, err := os.ReadFile(filepath.Join(sb.ws.Dir(), "from-sandbox"))
	require.NoError(t, err)
	assert.Equal(t, "back\n", string(b))

	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx2, &executor.Cmd{Args: []string{"sleep", "600"}})
		done <- err
	}()
	time.Sleep(time.Second)
	cancel2()
	select {
	case err := <-done:
		require.Error(t, err, "a cancelled command ends")
	case <-time.After(60 * time.Second):
		t.Fatal("cancelling a command did not stop it")
	}
	assert.Equal(t, "", strings.TrimSpace(mustRun(t, sb, "pgrep -x sleep || true")), "the killed command is gone")
	require.NoError(t, sb.Close(context.Background()))
}

// BenchmarkRuntime compares runc and runsc in one run, helper path: ready
// (Create until a command can run), exec (one `true`), and cli (`claude
// --version`, the CLI's start-up):
//
//	go test -run '^$' -bench Runtime -benchtime 5x ./executor/docker/
func BenchmarkRuntime(b *testing.B) {
	requireRunsc(b)
	bin := testenv.HelperBinary(b)
	ctx := context.Background()
	for _, rt := range []string{"runc", "runsc"} {
		spec := testSpec("bench-" + rt)
		spec.Runtime = rt
		e := newTestExecutor(b, func(o *Options) { o.HelperBinary = bin })
		b.Run("ready/"+rt, func(b *testing.B) {
			for b.Loop() {
				sb, err := e.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := sb.Close(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		sb, err := e.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		for name, args := range map[string][]string{"exec": {"true"}, "cli": {"claude", "--version"}} {
			b.Run(name+"/"+rt, func(b *testing.B) {
				for b.Loop() {
					res, err := sb.Exec(ctx, &executor.Cmd{Args: args})
					if err != nil || res.ExitCode != 0 {
						b.Fatalf("%v: exit %d, %v", args, res.ExitCode, err)
					}
				}
			})
		}
		if err := sb.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
