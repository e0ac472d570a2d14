package agentbox

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/middleware"
)

// TestBackendChoiceErrors: a backend whose options cannot work fails
// before anything starts, saying what to set. What the type of the choice
// rules out (a pool or a quota mode for a backend without one) is not a
// runtime error any more: those options do not exist there.
func TestBackendChoiceErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		o    Options
		is   error
		want string
	}{
		"local without a helper":        {o: Options{Backend: local.Options{}}, is: executor.ErrUnavailable, want: "make helper"},
		"local with a missing helper":   {o: Options{Backend: local.Options{HelperBinary: "/nonexistent/helper"}}, is: executor.ErrUnavailable, want: "make helper"},
		"local with a retention":        {o: Options{Backend: local.Options{HelperBinary: "/x"}, Retention: time.Hour}, is: executor.ErrInvalid, want: "does not sweep workspaces"},
		"docker, not a quota mode":      {o: Options{Backend: docker.Options{Quota: "prjquota"}}, want: `"prjquota" is not a quota mode`},
		"docker, its own data dir":      {o: Options{Backend: docker.Options{DataDir: "/elsewhere"}}, is: executor.ErrInvalid, want: "is not the gateway's"},
		"docker, its own retention":     {o: Options{Backend: docker.Options{Retention: time.Hour}, Retention: 2 * time.Hour}, is: executor.ErrInvalid, want: "set it once"},
		"kubernetes, no claims to keep": {o: Options{Backend: kubernetes.Options{}, Retention: time.Hour}, is: executor.ErrInvalid, want: "applies to workspace claims"},
		"no executor":                   {o: Options{Backend: Executor(nil)}, want: "Executor(nil)"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.o.DataDir = t.TempDir()
			_, err := newExecutor(context.Background(), tc.o, nil, hclog.NewNullLogger())
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, "Options.Backend")
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
}

// TestSandboxImages: the stack hands its backend its assistants' sandbox
// images, each once, in the catalog's order (Kubernetes' checkpoint pods
// run the first).
func TestSandboxImages(t *testing.T) {
	cat, err := middleware.NewCatalog(
		&middleware.Assistant{ID: "a", Sandbox: &middleware.Sandbox{Spec: executor.Spec{Image: "img:a"}}},
		&middleware.Assistant{ID: "b", Sandbox: &middleware.Sandbox{Spec: executor.Spec{Image: "img:b"}}},
		&middleware.Assistant{ID: "c", Sandbox: &middleware.Sandbox{Spec: executor.Spec{Image: "img:a"}}},
		&middleware.Assistant{ID: "qa"},
	)
	require.NoError(t, err)
	assert.Equal(t, []string{"img:a", "img:b"}, sandboxImages(cat))
}
