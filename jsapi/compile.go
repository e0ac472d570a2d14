package jsapi

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"github.com/evanw/esbuild/pkg/api"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/hooks"
)

// ErrNoHooks is returned by Load when the assistant has neither
// src/index.ts nor src/index.js: it has no hooks, which is fine.
var ErrNoHooks = errors.New("jsapi: assistant has no hooks (no src/index.ts or src/index.js)")

// ErrRunaway is returned without running the hook while earlier
// invocations of the same hooks are still stuck past their budget.
var ErrRunaway = errors.New("jsapi: too many runaway hook invocations")

// ErrStackOverflow marks a hook that recursed past MaxCallStackSize.
var ErrStackOverflow = errors.New("jsapi: maximum call stack size exceeded")

// ErrPromisePending is the error of an async hook whose Promise was still
// pending after every job that could settle it had run.
var ErrPromisePending = errors.New("jsapi: the hook's promise never settled")

// abandonGrace is how long past its budget a hook may take to stop before
// the caller stops waiting for it.
const abandonGrace = 50 * time.Millisecond

// ErrCompile marks a hook script that does not compile or whose top level
// throws; the message carries file:line:col.
var ErrCompile = errors.New("jsapi: hook script does not compile")

// Defaults of Options.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxCallStackSize = 1000
	DefaultMaxSandboxCalls  = 1000
	DefaultMaxSandboxBytes  = 64 << 20
	DefaultMaxStringLength  = 16 << 20
	DefaultMaxArrayLength   = 1 << 20
	DefaultMaxHeapGrowth    = 128 << 20
	DefaultMaxLogLines      = 1000
	DefaultMaxRunaway       = 4
)

// Options bound every hook invocation. Zero values select the defaults.
type Options struct {
	// Timeout is the time budget of one hook invocation (the assistant's
	// hook_timeout). Past it the script is interrupted and every pending
	// ctx.sandbox call is cancelled.
	Timeout time.Duration
	// MaxCallStackSize caps JavaScript call depth (max_call_stack).
	MaxCallStackSize int
	// MaxSandboxCalls caps ctx.sandbox calls per invocation.
	MaxSandboxCalls int
	// MaxSandboxBytes caps the bytes moved by ctx.sandbox per invocation:
	// files read and written plus command output.
	MaxSandboxBytes int64
	// MaxStringLength caps the length of a string built by repeat,
	// padStart, padEnd and join, which allocate in one native step.
	MaxStringLength int
	// MaxArrayLength caps the length an Array method may walk in one
	// native step (indexOf, sort, forEach over a sparse array, ...).
	MaxArrayLength int
	// MaxHeapGrowth is how far the process heap may grow while an
	// invocation runs before the watchdog interrupts it (bytes).
	MaxHeapGrowth uint64
	// MaxLogLines caps log.* and console.* lines per invocation; the rest
	// is dropped with one warning.
	MaxLogLines int
	// MaxRunaway is how many abandoned invocations (stuck in a built-in
	// past their budget) may still be running before new invocations of
	// these hooks are refused with ErrRunaway.
	MaxRunaway int
	// Logger receives load-time messages; hook output goes to the
	// request's hooks.Context.Logger.
	Logger hclog.Logger
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxCallStackSize <= 0 {
		o.MaxCallStackSize = DefaultMaxCallStackSize
	}
	if o.MaxSandboxCalls <= 0 {
		o.MaxSandboxCalls = DefaultMaxSandboxCalls
	}
	if o.MaxSandboxBytes <= 0 {
		o.MaxSandboxBytes = DefaultMaxSandboxBytes
	}
	if o.MaxStringLength <= 0 {
		o.MaxStringLength = DefaultMaxStringLength
	}
	if o.MaxArrayLength <= 0 {
		o.MaxArrayLength = DefaultMaxArrayLength
	}
	if o.MaxHeapGrowth == 0 {
		o.MaxHeapGrowth = DefaultMaxHeapGrowth
	}
	if o.MaxLogLines <= 0 {
		o.MaxLogLines = DefaultMaxLogLines
	}
	if o.MaxRunaway <= 0 {
		o.MaxRunaway = DefaultMaxRunaway
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// Hooks is a compiled hook script. It implements hooks.Hooks and is safe
// for concurrent use: each invocation runs in its own fresh runtime.
type Hooks struct {
	name      string
	prg       *goja.Program
	opts      Options
	hasCreate bool
	hasNext   bool
	runaway   atomic.Int64
}

var _ hooks.Hooks = (*Hooks)(nil)

// Load compiles the hooks of the assistant in dir (dir/src/index.ts, or
// dir/src/index.js when there is no .ts). It returns ErrNoHooks when there
// is neither. Positions in errors are relative to dir ("src/index.ts:3:7").
func Load(dir string, opts Options) (*Hooks, error) {
	for _, name := range []string{"src/index.ts", "src/index.js"} {
		src, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("load hooks of %s: %w", dir, err)
		}
		return Compile(name, src, opts)
	}
	return nil, ErrNoHooks
}

// Compile compiles hook source. name is the file name shown in positions;
// a name ending in ".ts" is TypeScript. Both JavaScript scripts with
// top-level `function Create(ctx, messages, options)` and modules that
// `export function Create` are accepted. The top level runs once here,
// under the time budget, to find which hooks are defined.
func Compile(name string, src []byte, opts Options) (*Hooks, error) {
	opts = opts.withDefaults()
	loader := api.LoaderJS
	switch strings.ToLower(filepath.Ext(name)) {
	case ".ts":
		loader = api.LoaderTS
	case ".js", ".mjs", ".cjs":
	default:
		return nil, fmt.Errorf("%s: %w: name must end in .ts or .js", name, ErrCompile)
	}
	res := api.Transform(string(src), api.TransformOptions{
		Loader:     loader,
		Sourcefile: path.Base(name), // goja resolves the map's sources next to name
		Sourcemap:  api.SourceMapInline,
		Format:     api.FormatCommonJS,
		Target:     api.ES2017,
		LogLevel:   api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		return nil, esbuildError(name, res.Errors)
	}
	ast, err := goja.Parse(name, string(res.Code))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	prg, err := goja.CompileAST(ast, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	h := &Hooks{name: name, prg: prg, opts: opts}
	if err := h.probe(); err != nil {
		return nil, err
	}
	opts.Logger.Debug("hooks compiled", "file", name, "create", h.hasCreate, "next", h.hasNext)
	return h, nil
}

func esbuildError(name string, msgs []api.Message) error {
	lines := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m.Location == nil {
			lines = append(lines, name+": "+m.Text)
			continue
		}
		lines = append(lines, fmt.Sprintf("%s:%d:%d: %s", name, m.Location.Line, m.Location.Column+1, m.Text))
	}
	return fmt.Errorf("%w: %s", ErrCompile, strings.Join(lines, "; "))
}

// Name returns the file name the hooks were compiled from.
func (h *Hooks) Name() string { return h.name }

// HasCreate implements hooks.Hooks.
func (h *Hooks) HasCreate() bool { return h.hasCreate }

// HasNext implements hooks.Hooks.
func (h *Hooks) HasNext() bool { return h.hasNext }
