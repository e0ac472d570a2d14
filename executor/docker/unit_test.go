package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
)

func TestNewPlanValidation(t *testing.T) {
	o, err := Options{DataDir: "/data", Image: "img"}.withDefaults()
	require.NoError(t, err)
	base := func() executor.Spec { return executor.Spec{UserID: "u", ChatID: "c"} }
	tests := map[string]struct {
		mutate  func(*executor.Spec)
		wantErr string // substring; "" means valid
	}{
		"defaults":              {mutate: func(*executor.Spec) {}},
		"bad user id":           {mutate: func(s *executor.Spec) { s.UserID = "../x" }, wantErr: "user id"},
		"bad chat id":           {mutate: func(s *executor.Spec) { s.ChatID = "" }, wantErr: "chat id"},
		"bad assistant id":      {mutate: func(s *executor.Spec) { s.AssistantID = "a/b" }, wantErr: "assistant id"},
		"pids unlimited":        {mutate: func(s *executor.Spec) { s.PidsLimit = -1 }, wantErr: "unlimited"},
		"pids tiny":             {mutate: func(s *executor.Spec) { s.PidsLimit = 2 }, wantErr: "at least 8"},
		"memory unlimited":      {mutate: func(s *executor.Spec) { s.MemoryBytes = -1 }, wantErr: "MemoryBytes"},
		"cpus negative":         {mutate: func(s *executor.Spec) { s.CPUs = -1 }, wantErr: "CPUs"},
		"timeout negative":      {mutate: func(s *executor.Spec) { s.Timeout = -time.Second }, wantErr: "Timeout"},
		"network host":          {mutate: func(s *executor.Spec) { s.Network = "host" }, wantErr: "never host"},
		"network container":     {mutate: func(s *executor.Spec) { s.Network = "container:abc" }, wantErr: "Network"},
		"network named":         {mutate: func(s *executor.Spec) { s.Network = "egress-proxy" }},
		"runtime runsc":         {mutate: func(s *executor.Spec) { s.Runtime = "runsc" }},
		"runtime injection":     {mutate: func(s *executor.Spec) { s.Runtime = "runc --privileged" }, wantErr: "Runtime"},
		"user root":             {mutate: func(s *executor.Spec) { s.User = "0:0" }, wantErr: "root"},
		"user name":             {mutate: func(s *executor.Spec) { s.User = "agent" }, wantErr: "numeric"},
		"env without equals":    {mutate: func(s *executor.Spec) { s.Env = []string{"FOO"} }, wantErr: "KEY=VALUE"},
		"lease wait negative":   {mutate: func(s *executor.Spec) { s.LeaseWait = -1 }, wantErr: "LeaseWait"},
		"no image anywhere":     {mutate: func(s *executor.Spec) { s.Image = "" }, wantErr: ""},
		"explicit image wins":   {mutate: func(s *executor.Spec) { s.Image = "other" }},
		"memory below minimum":  {mutate: func(s *executor.Spec) { s.MemoryBytes = 1 << 20 }, wantErr: "6 MiB"},
		"timeout below 1s":      {mutate: func(s *executor.Spec) { s.Timeout = time.Millisecond }, wantErr: "Timeout"},
		"user gid root":         {mutate: func(s *executor.Spec) { s.User = "1000:0" }, wantErr: "root"},
		"user out of int range": {mutate: func(s *executor.Spec) { s.User = "99999999999:1" }, wantErr: "range"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := base()
			tc.mutate(&s)
			p, err := newPlan(s, o, time.Unix(0, 0))
			if tc.wantErr != "" {
				require.ErrorIs(t, err, executor.ErrInvalid)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Positive(t, p.spec.PidsLimit)
			assert.Positive(t, p.spec.MemoryBytes)
			assert.NotEmpty(t, p.image)
		})
	}
}

func TestContainerConfigBaseline(t *testing.T) {
	o, err := Options{DataDir: "/data", Image: "img", HelperBinary: "/bin/sh"}.withDefaults()
	require.NoError(t, err)
	p, err := newPlan(executor.Spec{UserID: "u", ChatID: "c", Timeout: time.Hour}, o, time.Now())
	require.NoError(t, err)
	cfg, hc := p.containerConfig(o, "sb1", "/data/workspaces/u/chat-c", "/data/sandboxes/sb1")
	assert.Equal(t, executor.DefaultUser, cfg.User)
	assert.Equal(t, []string{"sleep", "3600"}, []string(cfg.Cmd), "the main process ends at the deadline by itself")
	assert.True(t, cfg.NetworkDisabled)
	assert.True(t, hc.AutoRemove)
	assert.Equal(t, hc.Memory, hc.MemorySwap)
	assert.Empty(t, hc.Binds)
	require.Len(t, hc.Mounts, 4)
	assert.Equal(t, ContainerHelperPath, hc.Mounts[2].Target)
	assert.True(t, hc.Mounts[2].ReadOnly, "the helper binary is mounted read-only")
	assert.Equal(t, ContainerToolsPath, hc.Mounts[3].Target, "and again as abx, the agent's tools CLI")
	assert.True(t, hc.Mounts[3].ReadOnly)
	assert.Equal(t, "/data/sandboxes/sb1", hc.Mounts[1].Source, "the host dir is mounted as a directory")
	assert.Contains(t, p.helperCommand(o, ContainerHelperPath), "--deadline")
}

func TestOptionsValidation(t *testing.T) {
	tests := map[string]struct {
		o       Options
		wantErr string
	}{
		"no data dir":       {o: Options{}, wantErr: "DataDir is empty"},
		"relative data dir": {o: Options{DataDir: "data"}, wantErr: "relative"},
		"bad instance":      {o: Options{DataDir: "/d", InstanceID: "a b"}, wantErr: "instance id"},
		"relative helper":   {o: Options{DataDir: "/d", HelperBinary: "bin/h"}, wantErr: "HelperBinary"},
		"home root":         {o: Options{DataDir: "/d", Home: "/"}, wantErr: "Home"},
		"bad port":          {o: Options{DataDir: "/d", ModelPort: 70000}, wantErr: "ModelPort"},
		"ok":                {o: Options{DataDir: "/d/"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := tc.o.withDefaults()
			if tc.wantErr != "" {
				require.ErrorIs(t, err, executor.ErrInvalid)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "/d", o.DataDir)
			assert.NotEmpty(t, o.InstanceID)
			assert.Equal(t, DefaultRetention, o.Retention)
		})
	}
}

func TestReconcilerDecisions(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	future, past := now.Add(time.Hour).Format(time.RFC3339Nano), now.Add(-time.Second).Format(time.RFC3339Nano)
	mk := func(id, inst, deadline, dataDir string) container.Summary {
		return container.Summary{ID: id, Labels: map[string]string{
			LabelManagedBy: ManagedByValue, LabelInstance: inst, LabelDeadline: deadline,
			LabelDataDir: dataDir, LabelSandbox: "sb-" + id,
		}}
	}
	tests := map[string]struct {
		c      container.Summary
		held   bool
		remove bool
	}{
		"live owner, before deadline":      {c: mk("a", "live", future, "/d")},
		"live owner, deadline passed":      {c: mk("b", "live", past, "/d"), remove: true},
		"dead owner, before deadline":      {c: mk("c", "dead", future, "/d"), remove: true},
		"dead owner but leased here":       {c: mk("d", "dead", past, "/d"), held: true},
		"own instance, no lease":           {c: mk("e", "self", future, "/d"), remove: true},
		"own instance, leased":             {c: mk("f", "self", future, "/d"), held: true},
		"other data dir":                   {c: mk("g", "dead", past, "/other")},
		"live owner, no deadline label":    {c: mk("h", "live", "", "/d"), remove: true},
		"unmanaged (label spoofed partly)": {c: container.Summary{ID: "i", Labels: map[string]string{LabelInstance: "dead"}}},
	}
	for name, tc := range tests {
		for _, dry := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dry=%v", name, dry), func(t *testing.T) {
				var removedIDs, removedDirs []string
				r := &reconciler{
					logger: hclog.NewNullLogger(), dryRun: dry, self: "self", dataDir: "/d",
					list: func(context.Context) ([]container.Summary, error) { return []container.Summary{tc.c}, nil },
					remove: func(_ context.Context, id string) error {
						removedIDs = append(removedIDs, id)
						return nil
					},
					held:          func(string) bool { return tc.held },
					instanceAlive: func(inst string) bool { return inst == "live" },
					removeHostDir: func(sb string) error { removedDirs = append(removedDirs, sb); return nil },
					now:           func() time.Time { return now },
				}
				got, err := r.reconcile(context.Background())
				require.NoError(t, err)
				if tc.remove && !dry {
					assert.Equal(t, []string{tc.c.ID}, got)
					assert.Equal(t, []string{tc.c.ID}, removedIDs)
					assert.Equal(t, []string{"sb-" + tc.c.ID}, removedDirs)
				} else {
					assert.Empty(t, got)
					assert.Empty(t, removedIDs)
				}
			})
		}
	}
}

func TestReconcilerJoinsRealErrors(t *testing.T) {
	boom := errors.New("daemon exploded")
	r := &reconciler{
		logger: hclog.NewNullLogger(), self: "self", dataDir: "/d",
		list: func(context.Context) ([]container.Summary, error) {
			return []container.Summary{
				{ID: "x", Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelDataDir: "/d", LabelInstance: "dead"}},
				{ID: "y", Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelDataDir: "/d", LabelInstance: "dead"}},
			}, nil
		},
		remove: func(_ context.Context, id string) error {
			if id == "x" {
				return boom
			}
			return nil
		},
		held:          func(string) bool { return false },
		instanceAlive: func(string) bool { return false },
		removeHostDir: func(string) error { return nil },
		now:           time.Now,
	}
	got, err := r.reconcile(context.Background())
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, []string{"y"}, got, "one failure does not stop the others")
}

func TestIgnorableRemoveError(t *testing.T) {
	tests := map[string]struct {
		err  error
		want bool
	}{
		"nil":                 {err: nil, want: true},
		"not found":           {err: cerrdefs.ErrNotFound, want: true},
		"removal in progress": {err: fmt.Errorf("%w: removal of container abc is already in progress", cerrdefs.ErrConflict), want: true},
		"other conflict":      {err: fmt.Errorf("%w: container is paused", cerrdefs.ErrConflict)},
		"daemon down":         {err: errors.New("connection refused")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, ignorableRemoveError(tc.err))
		})
	}
	joined := removeErrors(cerrdefs.ErrNotFound, errors.New("a"), nil, errors.New("b"))
	assert.EqualError(t, joined, "a\nb")
}

func TestFileLockAcrossOpens(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	f1, err := os.Create(p)
	require.NoError(t, err)
	l1, err := lockFile(context.Background(), f1, 0)
	require.NoError(t, err)
	f2, err := os.Open(p)
	require.NoError(t, err)
	_, err = lockFile(context.Background(), f2, 60*time.Millisecond)
	assert.ErrorIs(t, err, executor.ErrBusy, "a second open file description is refused, as another process would be")
	require.NoError(t, l1.Close())
	l2, err := lockFile(context.Background(), f2, 0)
	require.NoError(t, err)
	require.NoError(t, l2.Close())
	var nilLock *fileLock
	assert.NoError(t, nilLock.Close())
}

func TestRetentionSweep(t *testing.T) {
	data := t.TempDir()
	root, err := os.OpenRoot(data)
	require.NoError(t, err)
	defer func() { _ = root.Close() }()
	layout, err := executor.OpenWorkspaceLayout(data)
	require.NoError(t, err)
	now := time.Now()
	old := now.Add(-8 * 24 * time.Hour)
	mkChat := func(user, chat string, lastUse time.Time, lockFile bool) string {
		dir := layout.Dir(user, chat)
		if !lockFile {
			// Only a chat of the legacy layout can have no lock file.
			dir = filepath.Join(data, executor.LegacyRel(user, chat))
		}
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o644))
		if lockFile {
			lf := filepath.Join(data, chatLockName(user, chat))
			require.NoError(t, os.MkdirAll(filepath.Dir(lf), 0o700))
			require.NoError(t, os.WriteFile(lf, nil, 0o600))
			require.NoError(t, os.Chtimes(lf, lastUse, lastUse))
		}
		require.NoError(t, os.Chtimes(dir, lastUse, lastUse))
		return dir
	}
	expired := mkChat("u1", "old", old, true)
	fresh := mkChat("u1", "new", now, true)
	noLock := mkChat("u2", "legacy", old, false)
	leased := mkChat("u2", "busy", old, true)
	flocked := mkChat("u3", "other-gateway", old, true)
	// A symlinked "chat" pointing outside must not be followed or removed.
	outside := filepath.Join(data, "outside")
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(data, executor.LegacyWorkspacesDir, "u1"), 0o700))
	require.NoError(t, os.Symlink(outside, filepath.Join(data, executor.LegacyWorkspacesDir, "u1", "chat-link")))
	require.NoError(t, os.Symlink(filepath.Join(outside), filepath.Join(expired, "escape")))
	// A neutral name that is a symlink: the link goes, never its target.
	linked := mkChat("u1", "linked", old, true)
	require.NoError(t, os.RemoveAll(linked))
	require.NoError(t, os.Symlink(outside, linked))

	// Another gateway holds u3's chat.
	f, err := os.OpenFile(filepath.Join(data, chatLockName("u3", "other-gateway")), os.O_RDWR, 0)
	require.NoError(t, err)
	other, err := lockFile(context.Background(), f, 0)
	require.NoError(t, err)
	defer func() { _ = other.Close() }()

	l := executor.NewLeases()
	hold, err := l.Acquire(context.Background(), "u2/busy", 0)
	require.NoError(t, err)
	defer hold()

	for _, dry := range []bool{true, false} {
		r := &retention{
			logger: hclog.NewNullLogger(), dryRun: dry, keep: 7 * 24 * time.Hour, root: root, layout: layout, now: time.Now,
			tryLease: func(user, chat string) (func(), bool) {
				rel, err := l.Acquire(context.Background(), user+"/"+chat, 0)
				return rel, err == nil
			},
		}
		removed, err := r.sweep(context.Background())
		require.NoError(t, err)
		if dry {
			assert.Empty(t, removed)
			assert.DirExists(t, expired)
			continue
		}
		assert.ElementsMatch(t, []string{layout.Rel("u1", "old"), layout.Rel("u1", "linked"), "workspaces/u2/chat-legacy"}, removed)
	}
	assert.NoDirExists(t, expired)
	assert.NoDirExists(t, noLock)
	assert.NoFileExists(t, linked)
	assert.NoFileExists(t, filepath.Join(data, chatLockName("u1", "old")), "the lock goes with the chat")
	assert.DirExists(t, fresh)
	assert.DirExists(t, leased, "leased in this process")
	assert.DirExists(t, flocked, "locked by another gateway")
	assert.FileExists(t, filepath.Join(outside, "keep"), "symlinks are never followed")
}

func TestCappedWriter(t *testing.T) {
	var hits atomic.Int32
	var sb strings.Builder
	w := &cappedWriter{w: &sb, limit: 5, onCap: func() { hits.Add(1) }}
	n, err := w.Write([]byte("abc"))
	assert.Equal(t, 3, n)
	require.NoError(t, err)
	n, err = w.Write([]byte("defg"))
	assert.Equal(t, 2, n)
	assert.ErrorIs(t, err, errOutputCap)
	assert.Equal(t, "abcde", sb.String())
	assert.Equal(t, int32(1), hits.Load())

	boom := errors.New("closed pipe")
	w = &cappedWriter{w: failWriter{boom}, limit: 5}
	_, err = w.Write([]byte("x"))
	assert.ErrorIs(t, err, boom)
	assert.ErrorIs(t, w.werr, boom)
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestExitStatus(t *testing.T) {
	tests := map[string]struct {
		code     int
		wantCode int
		wantSig  string
	}{
		"success":      {code: 0, wantCode: 0},
		"failure":      {code: 3, wantCode: 3},
		"SIGKILL":      {code: 137, wantCode: -1, wantSig: "SIGKILL"},
		"SIGTERM":      {code: 143, wantCode: -1, wantSig: "SIGTERM"},
		"plain 128":    {code: 128, wantCode: 128},
		"out of range": {code: 200, wantCode: 200},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, sig := exitStatus(tc.code)
			assert.Equal(t, tc.wantCode, code)
			assert.Equal(t, tc.wantSig, sig)
		})
	}
}

func TestParseOOMKill(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    int64
		wantErr error
	}{
		"cgroup v1":  {in: "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", want: 3},
		"cgroup v2":  {in: "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n", want: 2},
		"old kernel": {in: "oom_kill_disable 0\nunder_oom 0\n", wantErr: errNoOOMCounter},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n, err := parseOOMKill([]byte(tc.in))
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, n)
		})
	}
}

func TestHasEnvEntry(t *testing.T) {
	env := []byte("A=1\x00AGENTBOX_EXEC=tok\x00B=AGENTBOX_EXEC=tok2\x00")
	assert.True(t, hasEnvEntry(env, []byte("AGENTBOX_EXEC=tok")))
	assert.False(t, hasEnvEntry(env, []byte("AGENTBOX_EXEC=tok2")), "only whole entries match")
	assert.False(t, hasEnvEntry(env, []byte("AGENTBOX_EXEC=to")))
	assert.True(t, hasEnvEntry([]byte("AGENTBOX_EXEC=tok"), []byte("AGENTBOX_EXEC=tok")), "no trailing NUL")
	assert.False(t, hasEnvEntry(nil, []byte("x")))
}

func TestProcStatSelf(t *testing.T) {
	state, sid, ok := procStat(os.Getpid())
	require.True(t, ok)
	assert.NotEmpty(t, state)
	want, err := getsid()
	require.NoError(t, err)
	assert.Equal(t, want, sid)
	_, _, ok = procStat(-1)
	assert.False(t, ok)
}

// getsid is this process's session id.
func getsid() (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}

// TestPlanTakesTheTable: newPlan's defaults and bounds are executor's
// table, refused with the table's messages.
func TestPlanTakesTheTable(t *testing.T) {
	o, err := Options{DataDir: "/data", Image: "img"}.withDefaults()
	require.NoError(t, err)
	executortest.RunSpecTable(t, func(s executor.Spec) (executor.Spec, error) {
		p, err := newPlan(s, o, time.Now())
		return p.spec, err
	})
}
