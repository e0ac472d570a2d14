package kubernetes

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// BenchmarkBackends measures, in one run, what the two backends cost for
// the same image: create-to-ready plus close of a sandbox (Create returns
// once the helper answers), and an exec round trip of `true` through the
// helper (Docker: its unix socket; Kubernetes: the API server's port
// forward) and, on Kubernetes, through the API server's exec.
//
//	make k8s-up && AGENTBOX_KUBECONFIG=/var/lib/agentbox-k8s/admin.kubeconfig \
//	  go test -run '^$' -bench Backends -benchtime 5x ./executor/kubernetes
func BenchmarkBackends(b *testing.B) {
	img := testenv.RequireImage(b)
	de, err := docker.New(context.Background(), docker.Options{DataDir: b.TempDir(), Image: img, UseImageHelper: true, ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
	require.NoError(b, err)
	b.Cleanup(func() { _ = de.Close() })
	ke := clusterExecutor(b, Options{StopGrace: time.Second})
	spec := executor.Spec{UserID: "bench", MemoryBytes: 256 << 20, CPUs: 1, LeaseWait: time.Minute}

	for _, be := range []struct {
		name string
		e    executor.Executor
	}{{"docker", de}, {"kubernetes", ke}} {
		b.Run("create-close/"+be.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				s := spec
				s.ChatID = "create-" + be.name
				sb, err := be.e.Create(context.Background(), s)
				require.NoError(b, err)
				require.NoError(b, sb.Close(context.Background()))
			}
		})
		s := spec
		s.ChatID = "exec-" + be.name
		sb, err := be.e.Create(context.Background(), s)
		require.NoError(b, err)
		execs := map[string]func(context.Context, *executor.Cmd) (executor.ExecResult, error){"helper": sb.Exec}
		if ks, ok := sb.(*Sandbox); ok {
			execs["api"] = ks.execAPI
		}
		for path, exec := range execs {
			b.Run("exec-"+path+"/"+be.name, func(b *testing.B) {
				for b.Loop() {
					res, err := exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
					require.NoError(b, err)
					require.Equal(b, 0, res.ExitCode)
					if path == "helper" {
						require.Equal(b, PathHelper, res.Path, "the command did not go through the helper")
					}
				}
			})
		}
		require.NoError(b, sb.Close(context.Background()))
	}
}
