package middleware_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
	"github.com/agentbox/agentbox/middleware/modelroute"
)

// startupCase is one assistant sandbox for New: refused with want, or
// started when want is "".
type startupCase struct {
	set  func(sb *middleware.Sandbox, o *middleware.Options)
	want string
}

// runStartup runs New over ex for each case's assistant "coder".
func runStartup(t *testing.T, ex executor.Executor, cases map[string]startupCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sb := &middleware.Sandbox{Runner: "scripted", Spec: executor.Spec{Image: testenv.Image()}}
			o := middleware.Options{Executor: ex, Runners: []executor.Runner{&scripted.Runner{}}}
			tc.set(sb, &o)
			var err error
			o.Catalog, err = middleware.NewCatalog(&middleware.Assistant{ID: "coder", Sandbox: sb})
			require.NoError(t, err)
			orch, err := middleware.New(context.Background(), o)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, orch.Close())
				return
			}
			require.ErrorIs(t, err, executor.ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// spec sets a case's Spec.
func spec(f func(*executor.Spec)) func(*middleware.Sandbox, *middleware.Options) {
	return func(sb *middleware.Sandbox, _ *middleware.Options) { f(&sb.Spec) }
}

// TestStartupRefusesWhatDockerCannot: New over a real docker executor
// without the helper refuses, naming the assistant, the option and the
// backend, a runtime the daemon does not have, egress and a model route
// (both need the helper's relays); what it can do starts.
func TestStartupRefusesWhatDockerCannot(t *testing.T) {
	img := testenv.RequireImage(t)
	ex, err := docker.New(context.Background(), docker.Options{DataDir: t.TempDir(), Image: img, Logger: hclog.NewNullLogger(),
		ReconcileInterval: -1, RetentionInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, ex.Close()) })
	caps := ex.Capabilities()
	assert.Contains(t, caps.Runtimes, "runc", "the daemon's runtimes")
	assert.False(t, caps.ModelRelay || caps.Egress, "no helper, no relays")
	runStartup(t, ex, map[string]startupCase{
		"runtime": {set: spec(func(s *executor.Spec) { s.Runtime = "agentbox-no-such-runtime" }),
			want: `assistant "coder": sandbox.runtime "agentbox-no-such-runtime": the docker backend runs [`},
		"egress": {set: spec(func(s *executor.Spec) { s.Egress = true }),
			want: `assistant "coder": sandbox.egress: the docker backend has no egress relay (it runs without the helper; set Options.HelperBinary or UseImageHelper); remove sandbox.egress`},
		"model route": {set: func(sb *middleware.Sandbox, o *middleware.Options) {
			sb.Connector.Upstream, o.ModelRouter = "http://127.0.0.1:1", modelroute.New(modelroute.Options{})
		}, want: `assistant "coder": its model route needs the sandboxes' model relay, and the docker backend has none`},
		"what it can do": {set: spec(func(s *executor.Spec) {
			s.Runtime, s.Network, s.PidsLimit, s.IdleTTL, s.Inodes = "runc", "bridge", 512, time.Minute, 5000
		})},
	})
}

// TestStartupRefusesWhatLocalCannot: New over a real local executor
// refuses, naming the assistant, the option and the backend, the session
// policy, egress, a network, a runtime and a file-count quota; a process
// limit and a disk quota start.
func TestStartupRefusesWhatLocalCannot(t *testing.T) {
	testenv.RequireRoot(t, "the local executor")
	bwrap, err := exec.LookPath("bwrap")
	if err != nil && testenv.InCI() {
		t.Fatalf("CI=true and bubblewrap is not installed; .ci/setup installs it")
	} else if err != nil {
		t.Skip("bubblewrap is not installed (set CI=true to make this a failure)")
	}
	ex, err := local.New(context.Background(), local.Options{DataDir: t.TempDir(), HelperBinary: testenv.HelperBinary(t), Bwrap: bwrap, Commands: []string{}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, ex.Close()) })
	runStartup(t, ex, map[string]startupCase{
		"session policy": {set: spec(func(s *executor.Spec) { s.IdleTTL = time.Minute }),
			want: `assistant "coder": sandbox.policy "session": the local backend cannot keep a sandbox between requests; use policy "request"`},
		"egress": {set: spec(func(s *executor.Spec) { s.Egress = true }),
			want: `assistant "coder": sandbox.egress: the local backend has no egress relay; remove sandbox.egress`},
		"network": {set: spec(func(s *executor.Spec) { s.Network = "bridge" }),
			want: `assistant "coder": sandbox.network "bridge": the local backend gives sandboxes no network but loopback; remove sandbox.network`},
		"runtime": {set: spec(func(s *executor.Spec) { s.Runtime = "runsc" }),
			want: `assistant "coder": sandbox.runtime "runsc": the local backend has no runtime to choose (bubblewrap runs no OCI runtime; use the docker backend for one); remove sandbox.runtime`},
		"inodes": {set: spec(func(s *executor.Spec) { s.Inodes = 5000 }),
			want: `assistant "coder": sandbox.max_inodes 5000: the local backend does not bound a workspace's number of files (its quota is per-file); remove sandbox.max_inodes`},
		"what it can do": {set: spec(func(s *executor.Spec) {
			s.PidsLimit, s.DiskBytes, s.Inodes = 512, 1<<30, executor.DefaultInodesFor(1<<30)
		})},
	})
}

// TestStartupRefusesWhatKubernetesCannot: New over an executor declaring
// what kubernetes.Options declare (no cluster here, so a fake executor
// stands in for the pods) refuses a set process limit, naming the
// assistant, the option and the backend, and takes the default one (0, or
// DefaultPidsLimit as the configuration fills it in) and the session
// policy.
func TestStartupRefusesWhatKubernetesCannot(t *testing.T) {
	caps := kubernetes.Options{}.Capabilities()
	ex := executortest.NewExecutor(t)
	ex.Caps = &caps
	runStartup(t, ex, map[string]startupCase{
		"pids set": {set: spec(func(s *executor.Spec) { s.PidsLimit = 512 }),
			want: `assistant "coder": sandbox.pids 512: the kubernetes backend cannot limit processes per sandbox (a pod's process limit is its node's kubelet podPidsLimit; set that to the limit you want); remove sandbox.pids`},
		"network": {set: spec(func(s *executor.Spec) { s.Network = "bridge" }),
			want: `assistant "coder": sandbox.network "bridge": the kubernetes backend gives sandboxes no network but loopback (the model and egress reach the gateway through the helper's relays); remove sandbox.network`},
		"pids default":   {set: spec(func(s *executor.Spec) { s.PidsLimit = executor.DefaultPidsLimit })},
		"pids unset":     {set: spec(func(*executor.Spec) {})},
		"session policy": {set: spec(func(s *executor.Spec) { s.IdleTTL = time.Minute })},
	})
}
