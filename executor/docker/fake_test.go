package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// fakeDocker answers the calls Close and the reconciler make; the others
// are not expected (nil interface methods panic if called).
type fakeDocker struct {
	dockerAPI
	removeErr error
	removed   []string
}

func (f *fakeDocker) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	f.removed = append(f.removed, id)
	return f.removeErr
}

func (f *fakeDocker) ContainerList(context.Context, container.ListOptions) ([]container.Summary, error) {
	return nil, nil
}

func (f *fakeDocker) Close() error { return nil }

// TestSandboxCloseErrors: removal errors that mean "gone anyway" are
// success, others are returned; either way the chat is released, the host
// dir removed and later calls return the same result.
func TestSandboxCloseErrors(t *testing.T) {
	tests := map[string]struct {
		removeErr error
		wantErr   bool
	}{
		"removed":             {},
		"already gone":        {removeErr: cerrdefs.ErrNotFound},
		"removal in progress": {removeErr: fmt.Errorf("%w: removal of container c1 is already in progress", cerrdefs.ErrConflict)},
		"daemon failure":      {removeErr: errors.New("daemon unavailable"), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &fakeDocker{removeErr: tc.removeErr}
			o, err := Options{DataDir: t.TempDir(), Logger: hclog.NewNullLogger(), ReconcileInterval: -1, RetentionInterval: -1}.withDefaults()
			require.NoError(t, err)
			e, err := newExecutor(context.Background(), o, fake)
			require.NoError(t, err)
			defer func() { require.NoError(t, e.Close()) }()

			wsDir := filepath.Join(o.DataDir, "test-workspace")
			require.NoError(t, os.Mkdir(wsDir, 0o755))
			ws, err := executor.OpenWorkspace(wsDir, executor.WorkspaceOptions{UID: -1, GID: -1})
			require.NoError(t, err)
			hostDir, err := e.makeHostDir("sb1", os.Geteuid(), os.Getegid())
			require.NoError(t, err)
			releases := 0
			sb := &Sandbox{e: e, id: "c1", sandboxID: "sb1", hostDir: hostDir, ws: ws, logger: hclog.NewNullLogger(), release: func() { releases++ }}

			err = sb.Close(context.Background())
			if tc.wantErr {
				assert.ErrorIs(t, err, tc.removeErr)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, err, sb.Close(context.Background()), "a second Close returns the first result")
			assert.Equal(t, []string{"c1"}, fake.removed, "one removal")
			assert.Equal(t, 1, releases, "the chat is released once")
			assert.NoDirExists(t, hostDir)
			_, err = sb.Exec(context.Background(), &executor.Cmd{Args: []string{"true"}})
			assert.ErrorIs(t, err, executor.ErrNotRunning)
		})
	}
}
