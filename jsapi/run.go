package jsapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
)

// invocation is the state of one hook call: one runtime, one budget.
type invocation struct {
	h    *Hooks
	hook string
	ctx  context.Context
	rt   *goja.Runtime
	hc   *hooks.Context
	log  hclog.Logger

	stringify  goja.Callable
	parse      goja.Callable
	ownPropDsc goja.Callable

	mu        sync.Mutex
	abandoned bool
	// epoch counts entries to and exits from Go callbacks (odd: inside).
	epoch atomic.Int64
	// inCall is the Go callback running now, if any: what an abandoned
	// invocation's error names.
	inCall atomic.Pointer[builtinCall]
	// goErrs maps the Errors thrown by Go callbacks to their Go errors
	// (see goError). Only the runtime's goroutine touches it.
	goErrs map[*goja.Object]error

	sandboxCalls int
	sandboxBytes int64
	logLines     int
	uiSeq        int
	uiPrefix     string
}

// Create implements hooks.Hooks: it calls the script's Create(ctx,
// messages, options). A returned {messages} replaces the conversation;
// null or undefined keeps it; a throw rejects the request.
func (h *Hooks) Create(ctx context.Context, hc *hooks.Context, messages []executor.Message) (*hooks.CreateResult, error) {
	var out *hooks.CreateResult
	err := h.invoke(ctx, hc, "Create", func(inv *invocation) ([]goja.Value, error) {
		if messages == nil {
			messages = []executor.Message{}
		}
		msgs, err := inv.fromGo(messages)
		if err != nil {
			return nil, err
		}
		opts, err := inv.options()
		return []goja.Value{msgs, opts}, err
	}, func(inv *invocation, v goja.Value) error {
		if goja.IsUndefined(v) || goja.IsNull(v) {
			return nil
		}
		if _, ok := v.(*goja.Object); !ok || isArray(v) {
			return fmt.Errorf("Create returned %s; return {messages} to replace the conversation, or null to keep it", typeOf(v))
		}
		var res struct {
			Messages *[]executor.Message `json:"messages"`
		}
		if err := inv.toGo(v, &res); err != nil {
			return fmt.Errorf("Create returned a value that is not {messages: [{role, content}]}: %w; use strings for role and content, or return null to keep the conversation", err)
		}
		if res.Messages != nil {
			out = &hooks.CreateResult{Messages: *res.Messages}
			if out.Messages == nil {
				out.Messages = []executor.Message{}
			}
		}
		return nil
	})
	return out, err
}

// Next implements hooks.Hooks: it calls the script's Next(ctx, payload,
// options) with payload {completion, error}. null or undefined keeps the
// response; {content, finish_reason?} replaces it.
func (h *Hooks) Next(ctx context.Context, hc *hooks.Context, payload hooks.NextPayload) (*hooks.NextResult, error) {
	var out *hooks.NextResult
	err := h.invoke(ctx, hc, "Next", func(inv *invocation) ([]goja.Value, error) {
		p := map[string]any{"completion": payload.Completion, "error": nil}
		if payload.Error != "" {
			p["error"] = payload.Error
		}
		pv, err := inv.fromGo(p)
		if err != nil {
			return nil, err
		}
		opts, err := inv.options()
		return []goja.Value{pv, opts}, err
	}, func(inv *invocation, v goja.Value) error {
		if goja.IsUndefined(v) || goja.IsNull(v) {
			return nil
		}
		if _, ok := v.(*goja.Object); !ok || isArray(v) {
			return fmt.Errorf("Next returned %s; return {content: \"...\"} to replace the response, or null to keep it", typeOf(v))
		}
		var res struct {
			Content      *string `json:"content"`
			FinishReason string  `json:"finish_reason"`
		}
		if err := inv.toGo(v, &res); err != nil || res.Content == nil {
			if err == nil {
				err = errors.New("no string content")
			}
			return fmt.Errorf("Next returned an object that is not {content: string, finish_reason?: string}: %w; return null to keep the response", err)
		}
		out = &hooks.NextResult{Content: *res.Content, FinishReason: res.FinishReason}
		return nil
	})
	return out, err
}

// invoke runs one hook in a fresh runtime under the budget. The script
// runs on its own goroutine: Interrupt stops JavaScript, but not a native
// built-in stuck in a long loop, so when the script has not stopped
// abandonGrace after its budget the caller gets the timeout anyway and the
// runaway goroutine is left to finish on its own, counted against
// MaxRunaway.
func (h *Hooks) invoke(parent context.Context, hc *hooks.Context, hook string,
	args func(*invocation) ([]goja.Value, error), result func(*invocation, goja.Value) error,
) error {
	if hc == nil {
		hc = &hooks.Context{}
	}
	if n := h.runaway.Load(); n >= int64(h.opts.MaxRunaway) {
		return &hooks.HookError{Hook: hook, Err: ErrRunaway, Message: fmt.Sprintf(
			"%d earlier invocations of %s are still stuck past their budget; fix the hook (see the earlier timeout errors) or restart the gateway: %v", n, h.name, ErrRunaway)}
	}
	budgetErr := fmt.Errorf("%s hook ran past its time budget of %s; raise hook_timeout in the assistant's sandbox options or make the hook do less: %w",
		hook, h.opts.Timeout, executor.ErrTimeout)
	ctx, cancel := context.WithTimeoutCause(parent, h.opts.Timeout, budgetErr)
	inv := h.newInvocation(ctx, hc, hook)
	stopInterrupt := context.AfterFunc(ctx, func() { inv.rt.Interrupt(context.Cause(ctx)) })
	stopWatchdog := inv.watchHeap(h.opts.MaxHeapGrowth)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		defer stopWatchdog()
		defer stopInterrupt()
		done <- inv.call(args, result)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// On a loaded machine this goroutine wakes late from the budget's
	// timer, and the script's goroutine, which must be scheduled to see
	// the interrupt, is as late: the grace counts from when the budget
	// was noticed here, plus that lateness.
	wait := abandonGrace
	if d, ok := ctx.Deadline(); ok {
		if late := time.Since(d); late > 0 {
			wait += late
		}
	}
	grace := time.NewTimer(wait)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	// Both may be ready by now: the script's own end wins.
	select {
	case err := <-done:
		return err
	default:
	}
	inv.abandon()
	h.runaway.Add(1)
	started := time.Now()
	go func() {
		err := <-done
		h.runaway.Add(-1)
		inv.log.Warn("abandoned hook invocation finished at last", "after", time.Since(started), "error", err)
	}()
	stuck := "a built-in call"
	if c := inv.inCall.Load(); c != nil {
		stuck = fmt.Sprintf("%s (running for %s)", c.name, time.Since(c.start).Round(time.Millisecond))
	}
	inv.log.Error("hook is stuck in a native call past its budget; abandoned it", "budget", h.opts.Timeout, "call", stuck)
	cause := context.Cause(ctx)
	return &hooks.HookError{Hook: hook, Err: cause, Message: fmt.Sprintf("%s (it was stuck in %s and was abandoned)", cause.Error(), stuck)}
}

// builtinCall is a Go callback a script is inside.
type builtinCall struct {
	name  string
	start time.Time
}

// call runs the script's top level and the hook, and converts the result.
func (inv *invocation) call(args func(*invocation) ([]goja.Value, error), result func(*invocation, goja.Value) error) (err error) {
	hook := inv.hook
	defer func() {
		if x := recover(); x != nil {
			inv.log.Error("hook runtime panicked", "panic", x, "stack", string(debug.Stack()))
			err = &hooks.HookError{Hook: hook, Message: fmt.Sprintf("internal error while running the hook: %v", x)}
		}
	}()
	if err := inv.setup(); err != nil {
		return err
	}
	fn, err := inv.entry()
	if err != nil || fn == nil {
		return err
	}
	ctxObj := inv.ctxObject()
	rest, err := args(inv)
	if err != nil {
		return &hooks.HookError{Hook: hook, Message: err.Error(), Err: err}
	}
	v, err := fn(goja.Undefined(), append([]goja.Value{ctxObj}, rest...)...)
	if err != nil {
		return inv.thrown(err)
	}
	if v, err = inv.settled(v); err != nil {
		return err
	}
	if err := result(inv, v); err != nil {
		var he *hooks.HookError
		if errors.As(err, &he) {
			return err
		}
		return &hooks.HookError{Hook: hook, Message: err.Error(), Err: err}
	}
	return nil
}

// settled returns what an async hook's Promise resolved to, or the hook's
// error when it rejected, as a throw would; any other value is returned as
// it is. goja runs the job queue before the hook's call returns, under the
// same budget and interrupt as the call itself, so every continuation that
// can run has run: awaits of ctx.sandbox calls (synchronous Go) and of
// other promises. A Promise still pending then can never settle, since a
// hook has no timers or I/O events.
func (inv *invocation) settled(v goja.Value) (goja.Value, error) {
	obj, ok := v.(*goja.Object)
	// ExportType reads no property, so a hostile object runs no code here.
	if !ok || obj.ExportType() != reflect.TypeFor[*goja.Promise]() {
		return v, nil
	}
	p, _ := obj.Export().(*goja.Promise)
	switch p.State() {
	case goja.PromiseStateFulfilled:
		return p.Result(), nil
	case goja.PromiseStateRejected:
		return nil, inv.rejected(p.Result())
	}
	return nil, &hooks.HookError{Hook: inv.hook, Err: ErrPromisePending, Message: fmt.Sprintf(
		"%s returned a Promise that never settled: a hook has no timers or I/O events, so await only ctx.sandbox calls and promises that resolve at once: %v",
		inv.hook, ErrPromisePending)}
}

// rejected is the *hooks.HookError of a rejected async hook, described as
// thrown would describe the same value thrown.
func (inv *invocation) rejected(reason goja.Value) (out error) {
	defer func() {
		if x := recover(); x != nil {
			out = &hooks.HookError{Hook: inv.hook, Err: context.Cause(inv.ctx),
				Message: "rejected with a value that could not be inspected within the budget; reject with new Error(\"...\") instead"}
		}
	}()
	if inv.ctx.Err() != nil {
		inv.rt.Interrupt(context.Cause(inv.ctx))
	}
	he := &hooks.HookError{Hook: inv.hook}
	if obj, ok := reason.(*goja.Object); ok && inv.goErrs[obj] != nil {
		he.Err = inv.goErrs[obj]
		he.Message = he.Err.Error()
		return he
	}
	he.Message = inv.describe(reason)
	return he
}

// abandon cuts an invocation off from the request: later UI messages and
// memory writes of the runaway script are dropped.
func (inv *invocation) abandon() {
	inv.mu.Lock()
	inv.abandoned = true
	inv.mu.Unlock()
}

// live runs f unless the invocation was abandoned.
func (inv *invocation) live(f func() error) error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.abandoned {
		return context.Cause(inv.ctx)
	}
	return f()
}

func (h *Hooks) newInvocation(ctx context.Context, hc *hooks.Context, hook string) *invocation {
	logger := hc.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &invocation{
		h: h, hook: hook, ctx: ctx, hc: hc,
		rt:       goja.New(),
		log:      logger.With("hook", hook, "file", h.name),
		uiPrefix: hex.EncodeToString(b[:]),
	}
}

// setup prepares the runtime (limits, guards, globals) and runs the
// script's top level.
func (inv *invocation) setup() error {
	rt := inv.rt
	rt.SetMaxCallStackSize(inv.h.opts.MaxCallStackSize)
	jsonObj := rt.Get("JSON").ToObject(rt)
	inv.stringify, _ = goja.AssertFunction(jsonObj.Get("stringify"))
	inv.parse, _ = goja.AssertFunction(jsonObj.Get("parse"))
	inv.ownPropDsc, _ = goja.AssertFunction(rt.Get("Object").ToObject(rt).Get("getOwnPropertyDescriptor"))
	if err := inv.installGuards(); err != nil {
		return err
	}
	module := rt.NewObject()
	exports := rt.NewObject()
	_ = module.Set("exports", exports)
	_ = rt.Set("module", module)
	_ = rt.Set("exports", exports)
	_ = rt.Set("log", inv.logObject())
	_ = rt.Set("console", inv.consoleObject())
	if _, err := rt.RunProgram(inv.h.prg); err != nil {
		return inv.thrown(err)
	}
	return nil
}

// entry finds the hook function: a global function, or a property of
// module.exports (or of its default export). It returns nil when absent.
func (inv *invocation) entry() (goja.Callable, error) {
	rt := inv.rt
	candidates := []goja.Value{rt.Get(inv.hook)}
	if m, ok := rt.Get("module").(*goja.Object); ok {
		if ex, ok := m.Get("exports").(*goja.Object); ok {
			candidates = append(candidates, ex.Get(inv.hook))
			if def, ok := ex.Get("default").(*goja.Object); ok {
				candidates = append(candidates, def.Get(inv.hook))
			}
		}
	}
	for _, c := range candidates {
		if c == nil || goja.IsUndefined(c) || goja.IsNull(c) {
			continue
		}
		fn, ok := goja.AssertFunction(c)
		if !ok {
			return nil, &hooks.HookError{Hook: inv.hook, Message: fmt.Sprintf("%s is %s, not a function; define function %s(ctx, ...) or remove it", inv.hook, typeOf(c), inv.hook)}
		}
		return fn, nil
	}
	return nil, nil
}

// probe runs the top level once at load to find which hooks exist and to
// report top-level errors then. Like invoke, it stops waiting for a top
// level stuck in a built-in past the budget.
func (h *Hooks) probe() error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), h.opts.Timeout,
		fmt.Errorf("the top level of %s ran past the time budget of %s: %w", h.name, h.opts.Timeout, executor.ErrTimeout))
	defer cancel()
	inv := h.newInvocation(ctx, &hooks.Context{}, "load")
	stop := context.AfterFunc(ctx, func() { inv.rt.Interrupt(context.Cause(ctx)) })
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- func() (err error) {
			defer func() {
				if x := recover(); x != nil {
					err = fmt.Errorf("internal error: %v", x)
				}
			}()
			if err := inv.setup(); err != nil {
				return err
			}
			for _, name := range []string{"Create", "Next"} {
				inv.hook = name
				fn, err := inv.entry()
				if err != nil {
					return err
				}
				if name == "Create" {
					h.hasCreate = fn != nil
				} else {
					h.hasNext = fn != nil
				}
			}
			return nil
		}()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(h.opts.Timeout + abandonGrace):
		err = context.Cause(ctx)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCompile, h.name, err)
	}
	return nil
}

// thrown turns what the script threw (or the interrupt) into a
// *hooks.HookError without running script code past the budget: when the
// budget is gone the runtime stays interrupted, so a hostile getter or
// toString stops at its first instruction.
func (inv *invocation) thrown(err error) (out error) {
	defer func() {
		if x := recover(); x != nil {
			out = &hooks.HookError{Hook: inv.hook, Err: context.Cause(inv.ctx),
				Message: "threw a value that could not be inspected within the budget; throw new Error(\"...\") instead"}
		}
	}()
	if inv.ctx.Err() != nil {
		inv.rt.Interrupt(context.Cause(inv.ctx))
	}
	he := &hooks.HookError{Hook: inv.hook}
	var intr *goja.InterruptedError
	var so *goja.StackOverflowError
	var ex *goja.Exception
	// A throw is matched first: errors.As matches the *goja.Exception
	// itself, while the later checks would call Exception.Unwrap, which
	// reads a property the script controls (a getter could run here).
	switch {
	case errors.As(err, &ex):
		he.Position = inv.position(ex.Stack())
		if obj, ok := ex.Value().(*goja.Object); ok && inv.goErrs[obj] != nil {
			goErr := inv.goErrs[obj]
			he.Err = goErr
			he.Message = goErr.Error()
			break
		}
		he.Message = inv.describe(ex.Value())
	case errors.As(err, &so):
		he.Position = inv.position(so.Stack())
		he.Err = ErrStackOverflow
		he.Message = fmt.Sprintf("call stack deeper than %d frames (max_call_stack); look for unbounded recursion: %v", inv.h.opts.MaxCallStackSize, ErrStackOverflow)
	case errors.As(err, &intr):
		he.Position = inv.position(intr.Stack())
		if e, ok := intr.Value().(error); ok {
			he.Err = e
			he.Message = e.Error()
		} else {
			he.Message = fmt.Sprintf("interrupted: %v", intr.Value())
		}
	default:
		he.Err = err
		he.Message = err.Error()
	}
	if inv.ctx.Err() != nil && he.Err == nil {
		// The budget ended while the script was unwinding: say so.
		he.Err = context.Cause(inv.ctx)
		he.Message += " (" + he.Err.Error() + ")"
	}
	return he
}

// describe renders a thrown value as text. Primitives are rendered by Go;
// for objects only the own data properties name and message of an Error
// are read, never toString, so a hostile object cannot run code here.
func (inv *invocation) describe(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "threw undefined; throw new Error(\"...\") to say why"
	case goja.IsNull(v):
		return "threw null; throw new Error(\"...\") to say why"
	}
	if sym, ok := v.(*goja.Symbol); ok {
		return "threw Symbol(" + truncate(sym.String(), 200) + ")"
	}
	obj, ok := v.(*goja.Object)
	if !ok {
		if s, isStr := v.Export().(string); isStr {
			return truncate(s, 4096)
		}
		return "threw " + truncate(v.String(), 200)
	}
	if obj.ClassName() == "Error" {
		name := inv.ownString(obj, "name")
		msg := inv.ownString(obj, "message")
		switch {
		case msg == "":
			if name == "" {
				name = "Error"
			}
			return name + " without a readable message"
		case name == "" || name == "Error":
			return truncate(msg, 4096)
		default:
			return name + ": " + truncate(msg, 4096)
		}
	}
	return fmt.Sprintf("threw a non-Error value (%s); throw new Error(\"...\") to say why", obj.ClassName())
}

// ownString returns a string data property of obj found on obj or its
// prototype chain without invoking getters, proxies or toString.
func (inv *invocation) ownString(obj *goja.Object, key string) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	for o, depth := obj, 0; o != nil && depth < 8; o, depth = o.Prototype(), depth+1 {
		if o.ExportType() == reflect.TypeOf(goja.Proxy{}) {
			return ""
		}
		d, err := inv.ownPropDsc(goja.Undefined(), o, inv.rt.ToValue(key))
		if err != nil {
			return ""
		}
		dobj, ok := d.(*goja.Object)
		if !ok {
			continue
		}
		if str, ok := dobj.Get("value").Export().(string); ok {
			return str
		}
		return ""
	}
	return ""
}

// position is the innermost frame in the hook's own file, as
// file:line:col of the author's source. goja reports source-mapped columns
// 0-based, so one is added.
func (inv *invocation) position(frames []goja.StackFrame) string {
	for i := range frames {
		f := &frames[i]
		p := f.Position()
		if p.Filename != inv.h.name || p.Line == 0 {
			continue
		}
		return fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column+1)
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func typeOf(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	case isArray(v):
		return "an array"
	}
	if _, ok := goja.AssertFunction(v); ok {
		return "a function"
	}
	if _, ok := v.(*goja.Object); ok {
		return "an object"
	}
	if _, ok := v.(*goja.Symbol); ok {
		return "a symbol"
	}
	switch v.Export().(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	}
	return "a " + v.ExportType().String()
}

func isArray(v goja.Value) bool {
	o, ok := v.(*goja.Object)
	return ok && o.ClassName() == "Array"
}

// fromGo converts a Go value to a fresh JavaScript value through JSON, so
// the script never holds a Go object.
func (inv *invocation) fromGo(v any) (goja.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return inv.parse(goja.Undefined(), inv.rt.ToValue(string(b)))
}

// toJSON serialises a script value with the runtime's original
// JSON.stringify (toJSON and getters run under the budget). undefined,
// functions and symbols are refused.
func (inv *invocation) toJSON(v goja.Value) ([]byte, error) {
	s, err := inv.stringify(goja.Undefined(), v)
	if err != nil {
		return nil, inv.thrown(err)
	}
	if goja.IsUndefined(s) {
		return nil, fmt.Errorf("%s cannot be stored as JSON; use strings, numbers, booleans, null, arrays or plain objects", typeOf(v))
	}
	str := s.String()
	if len(str) > int(inv.h.opts.MaxSandboxBytes) {
		return nil, fmt.Errorf("value is %d bytes as JSON, more than the %d allowed", len(str), inv.h.opts.MaxSandboxBytes)
	}
	return []byte(str), nil
}

// toGo decodes a script value into out through JSON.
func (inv *invocation) toGo(v goja.Value, out any) error {
	b, err := inv.toJSON(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func (inv *invocation) options() (goja.Value, error) {
	if inv.hc.Options == nil {
		return inv.rt.NewObject(), nil
	}
	return inv.fromGo(inv.hc.Options)
}
