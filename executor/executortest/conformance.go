package executortest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// RunConformance checks the behaviour every executor.Executor must show.
// newExecutor is called once; the executor is shared by the subtests, which
// run one after another. spec is the base of every Create (image, limits,
// user); the suite sets UserID (when empty), ChatID and LeaseWait itself,
// using fresh chat ids so that runs never collide.
//
// The commands it runs are POSIX shell tools (sh, cat, echo, printf,
// sleep, ln) that busybox provides in the sandbox image and the host
// provides for FakeSandbox.HostExec. It checks: Create; exec of echo,
// stdin, env, working directory, exit code, stderr kept apart from stdout;
// a timeout fails with ErrTimeout promptly and kills the command's
// children; an output cap fails with ErrOutputTooLarge; files round-trip
// through the FS methods and are visible to exec and back; path escapes
// (absolute paths, "..", a link planted by the sandbox) are refused; Close
// is idempotent and Exec after it fails with ErrNotRunning; the workspace
// survives Close and the next sandbox of the chat sees it; a second Create
// on a leased chat fails with ErrBusy after LeaseWait; creates on
// different chats run in parallel; what Capabilities declares holds (its
// sandboxes implement the optional interfaces it names).
func RunConformance(t *testing.T, newExecutor func(t *testing.T) executor.Executor, spec executor.Spec) {
	t.Helper()
	ex := newExecutor(t)
	require.NotNil(t, ex, "newExecutor returned nil")
	if spec.UserID == "" {
		spec.UserID = "conformance"
	}
	suite := &conformance{ex: ex, spec: spec}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Create", suite.create},
		{"Capabilities", suite.capabilities},
		{"ExecEcho", suite.execEcho},
		{"ExecStdin", suite.execStdin},
		{"ExecEnv", suite.execEnv},
		{"ExecDir", suite.execDir},
		{"ExecExitCode", suite.execExitCode},
		{"ExecStderr", suite.execStderr},
		{"ExecEmptyArgv", suite.execEmptyArgv},
		{"ExecTimeout", suite.execTimeout},
		{"ExecOutputCap", suite.execOutputCap},
		{"FilesToExec", suite.filesToExec},
		{"ExecToFiles", suite.execToFiles},
		{"FilesAPI", suite.filesAPI},
		{"PathEscapes", suite.pathEscapes},
		{"Close", suite.close},
		{"WorkspaceSurvivesClose", suite.workspaceSurvives},
		{"Checkpoints", suite.checkpoints},
		{"LeaseBusy", suite.leaseBusy},
		{"ParallelCreates", suite.parallelCreates},
	} {
		t.Run(tc.name, tc.run)
	}
}

type conformance struct {
	ex   executor.Executor
	spec executor.Spec
}

// chat returns a spec for a fresh chat.
func (c *conformance) chat(t *testing.T) executor.Spec {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	s := c.spec
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	s.ChatID = strings.Trim(name, "-") + "-" + hex.EncodeToString(rnd[:])
	return s
}

// open creates a sandbox for spec, closed when the test ends.
func (c *conformance) open(t *testing.T, spec executor.Spec) executor.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.ex.Create(ctx, spec)
	require.NoError(t, err, "Create")
	require.NotNil(t, sb)
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb
}

// run executes argv and returns stdout, stderr and the result.
func run(t *testing.T, sb executor.Sandbox, cmd *executor.Cmd) (string, string, executor.ExecResult, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errOut
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Exec(ctx, cmd)
	return out.String(), errOut.String(), res, err
}

func (c *conformance) create(t *testing.T) {
	sb := c.open(t, c.chat(t))
	assert.NotEmpty(t, sb.ID())
	assert.Equal(t, executor.ContainerWorkdir, sb.Workdir())
}

// capabilities: what the executor declares, its sandboxes do.
func (c *conformance) capabilities(t *testing.T) {
	caps := c.ex.Capabilities()
	assert.NotEmpty(t, caps.Backend, "Capabilities names the backend")
	t0 := time.Now()
	sb := c.open(t, c.chat(t))
	assert.True(t, sb.Deadline().After(t0), "the sandbox ends after it started")
	if _, ok := sb.(executor.Keeper); caps.Keep {
		assert.True(t, ok, "Keep: its sandboxes implement executor.Keeper")
	}
	if relay, ok := sb.(executor.ModelRelay); caps.ModelRelay {
		require.True(t, ok, "ModelRelay: its sandboxes implement executor.ModelRelay")
		assert.NotEmpty(t, relay.ModelBaseURL())
	}
	if _, ok := sb.(executor.HostListener); caps.HostListener {
		assert.True(t, ok, "HostListener: its sandboxes implement executor.HostListener")
		assert.Empty(t, sb.HostDir(), "HostListener: its sandboxes have no host directory")
	}
	if _, ok := sb.(executor.Restorer); caps.Restore {
		assert.True(t, ok, "Restore: its sandboxes implement executor.Restorer")
	}
	if _, ok := c.ex.(executor.EnvironmentProber); caps.Environment {
		assert.True(t, ok, "Environment: it implements executor.EnvironmentProber")
	}
	if _, ok := c.ex.(executor.Checkpointer); caps.Checkpoints {
		assert.True(t, ok, "Checkpoints: it implements executor.Checkpointer")
	}
}

// checkpoints: a backend that keeps checkpoints takes a workspace between
// sandboxes, puts it back over what a later sandbox changed, forks it into
// another chat's empty workspace, and refuses an unknown checkpoint.
func (c *conformance) checkpoints(t *testing.T) {
	cp, ok := c.ex.(executor.Checkpointer)
	if !c.ex.Capabilities().Checkpoints || !ok {
		t.Skip("the backend keeps no checkpoints")
	}
	ctx := context.Background()
	spec := c.chat(t)
	user, chat := spec.UserID, spec.ChatID
	b := executor.CheckpointBounds{}
	start, err := cp.TakeCheckpoint(ctx, user, chat, "start", b)
	require.NoError(t, err, "a chat's start, before its workspace exists")
	assert.Zero(t, start.Files)

	first := c.open(t, spec)
	require.NoError(t, first.WriteFile(ctx, "a.txt", []byte("v1")))
	require.NoError(t, first.Close(ctx))
	turn1, err := cp.TakeCheckpoint(ctx, user, chat, "turn 1", b)
	require.NoError(t, err)
	assert.Equal(t, 1, turn1.Files)

	second := c.open(t, spec)
	require.NoError(t, second.WriteFile(ctx, "a.txt", []byte("v2")))
	require.NoError(t, second.WriteFile(ctx, "b.txt", []byte("b")))
	require.NoError(t, second.Close(ctx))
	_, err = cp.TakeCheckpoint(ctx, user, chat, "turn 2", b)
	require.NoError(t, err)

	res, err := cp.RestoreCheckpoint(ctx, user, chat, turn1.ID)
	require.NoError(t, err)
	assert.Positive(t, res.Written+res.Removed)
	list, head, err := cp.Checkpoints(ctx, user, chat)
	require.NoError(t, err)
	assert.Len(t, list, 3)
	assert.Equal(t, turn1.ID, head, "the workspace was last restored to turn 1")
	third := c.open(t, spec)
	got, err := third.ReadFile(ctx, "a.txt")
	require.NoError(t, err)
	assert.Equal(t, "v1", string(got))
	_, err = third.ReadFile(ctx, "b.txt")
	assert.ErrorIs(t, err, executor.ErrNotFound)
	require.NoError(t, third.Close(ctx))

	fork := c.chat(t)
	_, err = cp.ForkCheckpoint(ctx, user, chat, turn1.ID, fork.UserID, fork.ChatID, b)
	require.NoError(t, err)
	forked := c.open(t, fork)
	got, err = forked.ReadFile(ctx, "a.txt")
	require.NoError(t, err)
	assert.Equal(t, "v1", string(got), "the fork starts from the checkpoint")

	_, err = cp.RestoreCheckpoint(ctx, user, chat, "ck_0000000000000deadbeef0")
	assert.ErrorIs(t, err, executor.ErrNotFound)
}

func (c *conformance) execEcho(t *testing.T) {
	sb := c.open(t, c.chat(t))
	out, errOut, res, err := run(t, sb, &executor.Cmd{Args: []string{"echo", "hello", "world"}})
	require.NoError(t, err)
	assert.Equal(t, "hello world\n", out)
	assert.Empty(t, errOut)
	assert.Equal(t, 0, res.ExitCode)
}

func (c *conformance) execStdin(t *testing.T) {
	sb := c.open(t, c.chat(t))
	in := strings.Repeat("line of stdin\n", 5000) // more than a pipe buffer
	out, _, res, err := run(t, sb, &executor.Cmd{Args: []string{"cat"}, Stdin: strings.NewReader(in)})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, in, out)
}

func (c *conformance) execEnv(t *testing.T) {
	sb := c.open(t, c.chat(t))
	out, _, _, err := run(t, sb, &executor.Cmd{
		Args: []string{"sh", "-c", `printf '%s|%s' "$FOO" "$BAR"`},
		Env:  []string{"FOO=bar baz", "BAR=2"},
	})
	require.NoError(t, err)
	assert.Equal(t, "bar baz|2", out)
}

func (c *conformance) execDir(t *testing.T) {
	ctx := context.Background()
	sb := c.open(t, c.chat(t))
	require.NoError(t, sb.WriteFile(ctx, "sub/dir/where", []byte("in sub/dir")))
	require.NoError(t, sb.WriteFile(ctx, "where", []byte("at the root")))
	out, _, _, err := run(t, sb, &executor.Cmd{Args: []string{"cat", "where"}, Dir: executor.ContainerWorkdir + "/sub/dir"})
	require.NoError(t, err)
	assert.Equal(t, "in sub/dir", out)
	out, _, _, err = run(t, sb, &executor.Cmd{Args: []string{"cat", "where"}})
	require.NoError(t, err)
	assert.Equal(t, "at the root", out, "the default directory is the workspace")
}

func (c *conformance) execExitCode(t *testing.T) {
	sb := c.open(t, c.chat(t))
	_, _, res, err := run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "exit 3"}})
	require.NoError(t, err, "a non-zero exit is a result, not an error")
	assert.Equal(t, 3, res.ExitCode)
	_, _, res, err = run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "kill -9 $$"}})
	require.NoError(t, err)
	assert.NotEqual(t, 0, res.ExitCode, "killed by a signal")
}

func (c *conformance) execStderr(t *testing.T) {
	sb := c.open(t, c.chat(t))
	out, errOut, _, err := run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}})
	require.NoError(t, err)
	assert.Equal(t, "out\nout2\n", out)
	assert.Equal(t, "err\n", errOut)
}

func (c *conformance) execEmptyArgv(t *testing.T) {
	sb := c.open(t, c.chat(t))
	_, err := sb.Exec(context.Background(), &executor.Cmd{})
	assert.ErrorIs(t, err, executor.ErrInvalid)
}

func (c *conformance) execTimeout(t *testing.T) {
	sb := c.open(t, c.chat(t))
	const timeout = 500 * time.Millisecond
	start := time.Now()
	// The background sleep holds stdout open: the whole group must die.
	_, _, _, err := run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "sleep 60 & sleep 60"}, Timeout: timeout})
	elapsed := time.Since(start)
	require.ErrorIs(t, err, executor.ErrTimeout)
	assert.Less(t, elapsed, timeout+10*time.Second, "Exec returns promptly after the timeout")

	out, _, _, err := run(t, sb, &executor.Cmd{Args: []string{"echo", "still usable"}})
	require.NoError(t, err, "the sandbox survives a timed-out command")
	assert.Equal(t, "still usable\n", out)
}

func (c *conformance) execOutputCap(t *testing.T) {
	sb := c.open(t, c.chat(t))
	start := time.Now()
	out, _, _, err := run(t, sb, &executor.Cmd{
		Args:      []string{"sh", "-c", "while :; do echo 0123456789abcdef; done"},
		MaxOutput: 4096,
	})
	require.ErrorIs(t, err, executor.ErrOutputTooLarge)
	assert.LessOrEqual(t, len(out), 4096, "no more than the cap is passed on")
	assert.Less(t, time.Since(start), 30*time.Second)

	_, errOut, _, err := run(t, sb, &executor.Cmd{
		Args:      []string{"sh", "-c", "while :; do echo 0123456789abcdef >&2; done"},
		MaxOutput: 4096,
	})
	require.ErrorIs(t, err, executor.ErrOutputTooLarge, "stderr is capped too")
	assert.LessOrEqual(t, len(errOut), 4096)
}

func (c *conformance) filesToExec(t *testing.T) {
	ctx := context.Background()
	sb := c.open(t, c.chat(t))
	content := "from the host\nline 2\n"
	require.NoError(t, sb.WriteFile(ctx, executor.ContainerWorkdir+"/dir/in.txt", []byte(content)))
	got, err := sb.ReadFile(ctx, "dir/in.txt")
	require.NoError(t, err)
	assert.Equal(t, content, string(got))
	out, _, res, err := run(t, sb, &executor.Cmd{Args: []string{"cat", "dir/in.txt"}})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, content, out)
	// The sandbox user can change what the host wrote.
	_, errOut, res, err := run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "echo more >> dir/in.txt && echo x > dir/new.txt"}})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, "the sandbox user can write host-written files: %s", errOut)
}

func (c *conformance) execToFiles(t *testing.T) {
	ctx := context.Background()
	sb := c.open(t, c.chat(t))
	_, errOut, res, err := run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "mkdir -p made && printf 'by exec' > made/out.txt"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, errOut)
	got, err := sb.ReadFile(ctx, "made/out.txt")
	require.NoError(t, err)
	assert.Equal(t, "by exec", string(got))
	fi, err := sb.Stat(ctx, "/workspace/made/out.txt")
	require.NoError(t, err)
	assert.Equal(t, int64(len("by exec")), fi.Size)
}

func (c *conformance) filesAPI(t *testing.T) {
	ctx := context.Background()
	sb := c.open(t, c.chat(t))
	require.NoError(t, sb.WriteFile(ctx, "b.txt", []byte("x := 1\n")))
	require.NoError(t, sb.WriteFile(ctx, "a/c.txt", nil))
	list, err := sb.ListDir(ctx, executor.ContainerWorkdir)
	require.NoError(t, err)
	var names []string
	for _, fi := range list {
		names = append(names, fmt.Sprintf("%s:%v", fi.Name, fi.IsDir))
	}
	assert.Equal(t, []string{"a:true", "b.txt:false"}, names)

	res, err := sb.EditFile(ctx, "b.txt", []executor.Edit{{Old: "x := 1", New: ptr("x := 2")}})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Applied)
	out, _, _, err := run(t, sb, &executor.Cmd{Args: []string{"cat", "b.txt"}})
	require.NoError(t, err)
	assert.Equal(t, "x := 2\n", out)

	_, err = sb.ReadFile(ctx, "missing.txt")
	assert.ErrorIs(t, err, executor.ErrNotFound)
}

func (c *conformance) pathEscapes(t *testing.T) {
	ctx := context.Background()
	sb := c.open(t, c.chat(t))
	for _, name := range []string{"/etc/passwd", "../../etc/passwd", "/workspace/../etc/passwd", "a\x00b"} {
		_, err := sb.ReadFile(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, name)
		assert.ErrorIs(t, sb.WriteFile(ctx, name, []byte("x")), executor.ErrPathEscapes, name)
	}
	// Links planted from inside the sandbox are never followed.
	_, errOut, res, err := run(t, sb, &executor.Cmd{Args: []string{"sh", "-c", "ln -s /etc/passwd passwd && ln -s ../../.. up && mkdir real && ln -s real inner"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, errOut)
	for _, name := range []string{"passwd", "up/etc/passwd", "inner/x"} {
		_, err := sb.ReadFile(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, name)
		assert.ErrorIs(t, sb.WriteFile(ctx, name, []byte("x")), executor.ErrPathEscapes, name)
	}
	_, err = sb.ListDir(ctx, "up")
	assert.ErrorIs(t, err, executor.ErrPathEscapes)
}

func (c *conformance) close(t *testing.T) {
	ctx := context.Background()
	sb := c.open(t, c.chat(t))
	require.NoError(t, sb.Close(ctx))
	assert.NoError(t, sb.Close(ctx), "Close is idempotent")
	_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"echo"}})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
}

func (c *conformance) workspaceSurvives(t *testing.T) {
	ctx := context.Background()
	spec := c.chat(t)
	first := c.open(t, spec)
	require.NoError(t, first.WriteFile(ctx, "keep/notes.md", []byte("remember me")))
	_, _, _, err := run(t, first, &executor.Cmd{Args: []string{"sh", "-c", "printf exec > keep/by-exec"}})
	require.NoError(t, err)
	require.NoError(t, first.Close(ctx))

	second := c.open(t, spec)
	got, err := second.ReadFile(ctx, "keep/notes.md")
	require.NoError(t, err)
	assert.Equal(t, "remember me", string(got))
	out, _, _, err := run(t, second, &executor.Cmd{Args: []string{"cat", "keep/notes.md", "keep/by-exec"}})
	require.NoError(t, err)
	assert.Equal(t, "remember meexec", out)

	other := c.open(t, c.chat(t))
	_, err = other.ReadFile(ctx, "keep/notes.md")
	assert.ErrorIs(t, err, executor.ErrNotFound, "another chat has its own workspace")
}

func (c *conformance) leaseBusy(t *testing.T) {
	ctx := context.Background()
	spec := c.chat(t)
	spec.LeaseWait = 300 * time.Millisecond
	holder := c.open(t, spec)

	start := time.Now()
	sb, err := c.ex.Create(ctx, spec)
	if sb != nil {
		_ = sb.Close(ctx)
	}
	require.ErrorIs(t, err, executor.ErrBusy)
	assert.GreaterOrEqual(t, time.Since(start), spec.LeaseWait, "Create waits LeaseWait before giving up")

	// Released by Close, the chat can be created again; a waiter gets it.
	spec.LeaseWait = time.Minute
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = holder.Close(context.Background())
	}()
	next := c.open(t, spec)
	assert.NotEqual(t, holder.ID(), next.ID())
}

func (c *conformance) parallelCreates(t *testing.T) {
	const n = 3
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	specs := make([]executor.Spec, n)
	for i := range n {
		specs[i] = c.chat(t)
		specs[i].LeaseWait = time.Second
	}
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := c.ex.Create(ctx, specs[i])
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { _ = sb.Close(context.Background()) }()
			var out bytes.Buffer
			_, errs[i] = sb.Exec(ctx, &executor.Cmd{Args: []string{"echo", specs[i].ChatID}, Stdout: &out})
			outs[i] = out.String()
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "create %d", i)
		assert.Equal(t, specs[i].ChatID+"\n", outs[i])
	}
}

func ptr(s string) *string { return &s }
