package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// newPoolExecutor is a test executor with the helper and a pool of size.
func newPoolExecutor(t *testing.T, size int, mutate ...func(*Options)) *Executor {
	t.Helper()
	bin := testenv.HelperBinary(t)
	return newTestExecutor(t, append([]func(*Options){func(o *Options) { o.HelperBinary, o.Pool = bin, size }}, mutate...)...)
}

// waitPool waits until e's pool holds n ready containers.
func waitPool(t *testing.T, e *Executor, n int) []*poolEntry {
	t.Helper()
	var ready []*poolEntry
	require.Eventually(t, func() bool {
		ready = e.pool.Ready()
		return len(ready) == n
	}, 2*time.Minute, 50*time.Millisecond, "the pool never held %d containers", n)
	return ready
}

// mountsUnder lists the mount points under dir in this process's mount
// namespace (the host's: the gateway and dockerd share it).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	mounts, err := readMountInfo()
	require.NoError(t, err)
	var out []string
	for _, m := range mounts {
		if m.point == real || strings.HasPrefix(m.point, real+"/") {
			out = append(out, m.point)
		}
	}
	return out
}

func TestPoolAdoptsAStartedContainer(t *testing.T) {
	e := newPoolExecutor(t, 2)
	ctx := context.Background()
	assert.Zero(t, e.pool.size(), "the pool fills on demand, not at New")

	first := create(t, e, testSpec("first"))
	require.NoError(t, first.WriteFile(ctx, "first-only.txt", []byte("chat one")))
	require.NoError(t, first.Close(ctx))
	ready := waitPool(t, e, 2)

	// The next new chat of the same configuration gets a started one.
	start := time.Now()
	sb := create(t, e, testSpec("second"))
	t.Logf("create with a pooled container took %v", time.Since(start))
	pooled := map[string]bool{ready[0].sb.id: true, ready[1].sb.id: true}
	require.True(t, pooled[sb.id], "the sandbox is one of the pooled containers")
	ins, err := e.api.ContainerInspect(ctx, sb.id)
	require.NoError(t, err)
	assert.NotEmpty(t, ins.Config.Labels[LabelPool])
	assert.Equal(t, PolicyPool, ins.Config.Labels[LabelPolicy])
	assert.Empty(t, ins.Config.Labels[LabelChat], "a pooled container is made before its chat is known")

	// The chat's workspace, and only it, is the container's /workspace,
	// both ways.
	require.NoError(t, sb.WriteFile(ctx, "from-host.txt", []byte("hello")))
	assert.Equal(t, "hello", mustRun(t, sb, "cat /workspace/from-host.txt"))
	assert.Equal(t, "from-host.txt", mustRun(t, sb, "ls -A"), "chat one's files stay in chat one")
	mustRun(t, sb, "echo inside > made-inside.txt")
	b, err := sb.ReadFile(ctx, "made-inside.txt")
	require.NoError(t, err)
	assert.Equal(t, "inside\n", string(b))

	// The other pooled container does not see it: the bind propagates
	// into its own slot only.
	var other *poolEntry
	for _, ent := range ready {
		if ent.sb.id != sb.id {
			other = ent
		}
	}
	require.NotNil(t, other)
	assert.Empty(t, mustRun(t, other.sb, "ls -A /workspace"))

	// Takeover finds it by its owner record, although no label names
	// the chat; the reconciler leaves both alone (open and pooled).
	list, err := e.chatContainers(ctx, "u1", "second")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, sb.id, list[0].ID)
	removed, err := e.rec.reconcile(ctx)
	require.NoError(t, err)
	assert.Empty(t, removed)

	slot := filepath.Join(e.pool.root, sb.sandboxID)
	assert.Contains(t, mountsUnder(t, e.pool.root), slot)
	require.NoError(t, sb.Close(ctx))
	assert.NotContains(t, mountsUnder(t, e.pool.root), slot, "Close unmounts the workspace from the slot")
	assert.NoDirExists(t, slot)
	b, err = os.ReadFile(filepath.Join(e.layout.Dir("u1", "second"), "made-inside.txt"))
	require.NoError(t, err, "the workspace outlives the container")
	assert.Equal(t, "inside\n", string(b))

	dataDir := e.o.DataDir
	require.NoError(t, e.Close())
	assert.Empty(t, mountsUnder(t, dataDir), "Close leaves no mount behind")
	names, err := dirNames(filepath.Join(dataDir, poolDir))
	require.NoError(t, err)
	assert.Empty(t, names)
}

func TestPoolTakeoverRemovesAnAdoptedContainer(t *testing.T) {
	e := newPoolExecutor(t, 1)
	ctx := context.Background()
	spec := testSpec("stolen")
	spec.IdleTTL = time.Minute
	require.NoError(t, create(t, e, spec).Close(ctx))
	waitPool(t, e, 1)
	sb := create(t, e, spec)
	require.NotEmpty(t, sb.plan.spec.ChatID)
	mustRun(t, sb, "echo mine > owner.txt")
	require.NoError(t, sb.Park())

	// Another instance on the same data directory takes the chat: the
	// adopted container (no chat label) must go before its own starts.
	other := newTestExecutor(t, func(o *Options) { o.DataDir = e.o.DataDir; o.HelperBinary = e.o.HelperBinary })
	sb2 := create(t, other, spec)
	assert.NotEqual(t, sb.id, sb2.id)
	_, err := e.api.ContainerInspect(ctx, sb.id)
	require.Error(t, err, "the adopted container was removed by the takeover")
	assert.NotContains(t, mountsUnder(t, e.pool.root), filepath.Join(e.pool.root, sb.sandboxID))
	assert.Equal(t, "mine", mustRun(t, sb2, "cat owner.txt"))
}

func TestPoolOptionsRefused(t *testing.T) {
	testenv.RequireDocker(t)
	for name, o := range map[string]Options{
		"no helper": {Pool: 1},
		"negative":  {Pool: -1, UseImageHelper: true},
		"too short": {Pool: 1, UseImageHelper: true, PoolIdle: time.Millisecond},
		"idle only": {UseImageHelper: true, PoolIdle: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			o.DataDir = t.TempDir()
			_, err := New(context.Background(), o)
			require.ErrorIs(t, err, executor.ErrInvalid)
			assert.Contains(t, err.Error(), "Options.Pool")
		})
	}
}

func TestPoolKey(t *testing.T) {
	p, err := newPlan(testSpec("a"), Options{Image: "img"}, time.Now())
	require.NoError(t, err)
	k, ok := poolKey(p)
	require.True(t, ok)
	q, err := newPlan(testSpec("b"), Options{Image: "img"}, time.Now())
	require.NoError(t, err)
	q.spec.AssistantID = "other"
	k2, _ := poolKey(q)
	assert.Equal(t, k, k2, "chat and assistant are not part of the key")
	q.spec.MemoryBytes *= 2
	k3, _ := poolKey(q)
	assert.NotEqual(t, k, k3, "limits are")
	q.spec.Runtime = "runsc"
	_, ok = poolKey(q)
	assert.False(t, ok, "gVisor does not see host mounts made after start")
}

// unmountAll detaches every mount under dir, so that a failed test leaves
// no mount (and t.TempDir can remove dir).
func unmountAll(t *testing.T, dir string) {
	mounts := mountsUnder(t, dir)
	slices.Reverse(mounts)
	for _, m := range mounts {
		_ = unmountDir(m)
	}
}

// failingCreate is a daemon on which no container can be created (one
// that cannot see the pool's mounts, say).
type failingCreate struct {
	fakeDocker
	creates atomic.Int32
}

func (f *failingCreate) ContainerCreate(context.Context, *container.Config, *container.HostConfig, *network.NetworkingConfig, *ocispec.Platform, string) (container.CreateResponse, error) {
	f.creates.Add(1)
	return container.CreateResponse{}, errors.New("invalid mount config: bind source path does not exist")
}

// TestPoolTurnsOffAfterFailures: a pool whose containers cannot start
// stops trying after executor.PoolMaxFailures fills in a row, instead of trying
// (and warning) after every request.
func TestPoolTurnsOffAfterFailures(t *testing.T) {
	testenv.RequireRoot(t, "the pool mounts a tmpfs")
	api := &failingCreate{}
	o, err := Options{DataDir: t.TempDir(), Image: "img", UseImageHelper: true, Pool: 1, ReconcileInterval: -1, RetentionInterval: -1}.withDefaults()
	require.NoError(t, err)
	e, err := newExecutor(context.Background(), o, api)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	p, err := newPlan(testSpec("x"), e.o, time.Now())
	require.NoError(t, err)
	for range executor.PoolMaxFailures + 2 {
		e.pool.refill(p)
		e.pool.Wait()
	}
	assert.Equal(t, int32(executor.PoolMaxFailures), api.creates.Load(), "no fill after the pool turned off")
	assert.True(t, e.pool.Off())
	names, err := dirNames(e.pool.root)
	require.NoError(t, err)
	assert.Empty(t, names, "failed fills leave no slot")
}
