package jsapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
)

// maxExecOutput caps one Exec's stdout and stderr, each.
const maxExecOutput = 8 << 20

// ExitError is what ctx.sandbox.Exec throws when the command exits with a
// non-zero code. In JavaScript the thrown Error carries exit_code, stdout
// and stderr properties.
type ExitError struct {
	Args     []string
	ExitCode int
	Signal   string
	Stdout   string
	Stderr   string
}

// Error implements error.
func (e *ExitError) Error() string {
	detail := strings.TrimSpace(e.Stderr)
	if detail == "" {
		detail = strings.TrimSpace(e.Stdout)
	}
	s := fmt.Sprintf("command %q exited with code %d", strings.Join(e.Args, " "), e.ExitCode)
	if e.Signal != "" {
		s += " (signal " + e.Signal + ")"
	}
	if detail != "" {
		s += ": " + truncate(detail, 1024)
	}
	return s
}

// fn wraps a typed Go callback: it refuses to start past the budget,
// recovers Go runtime panics into script errors, and turns a returned error
// into a JavaScript Error whose Go cause survives (errors.Is works on the
// hook's error).
func (inv *invocation) fn(name string, f func(call goja.FunctionCall) (goja.Value, error)) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		inv.epoch.Add(1)
		defer inv.epoch.Add(1)
		defer func() {
			if x := recover(); x != nil {
				if re, ok := x.(runtime.Error); ok {
					inv.log.Error("hook callback panicked", "function", name, "panic", re)
					panic(inv.goError(fmt.Errorf("%s: internal error: %w", name, re)))
				}
				panic(x)
			}
		}()
		if inv.ctx.Err() != nil {
			panic(inv.goError(context.Cause(inv.ctx)))
		}
		inv.inCall.Store(&builtinCall{name: name, start: time.Now()})
		defer inv.inCall.Store(nil)
		v, err := f(call)
		if err != nil {
			var te typeErr
			if errors.As(err, &te) {
				panic(inv.rt.NewTypeError(name + ": " + string(te)))
			}
			if inv.ctx.Err() != nil {
				err = fmt.Errorf("%s: %w", name, context.Cause(inv.ctx))
			} else {
				err = fmt.Errorf("%s: %w", name, err)
			}
			obj := inv.goError(err)
			var ee *ExitError
			if errors.As(err, &ee) {
				_ = obj.Set("exit_code", ee.ExitCode)
				_ = obj.Set("stdout", ee.Stdout)
				_ = obj.Set("stderr", ee.Stderr)
			}
			panic(obj)
		}
		if v == nil {
			return goja.Undefined()
		}
		return v
	}
}

// goError makes the JavaScript Error a failed callback throws. goja's
// NewGoError puts the Go error on the object as `value`, which would hand
// the script a reflected Go value (methods, exported fields, pointers into
// the gateway) and let it rig what ex.Unwrap later reads; so the property
// is removed and the Go error is kept on the Go side, keyed by the object.
func (inv *invocation) goError(err error) *goja.Object {
	obj := inv.rt.NewGoError(err)
	_ = obj.Delete("value")
	if inv.goErrs == nil {
		inv.goErrs = map[*goja.Object]error{}
	}
	inv.goErrs[obj] = err
	return obj
}

// typeErr is a bad argument; it becomes a JavaScript TypeError.
type typeErr string

func (e typeErr) Error() string { return string(e) }

func argString(call goja.FunctionCall, i int, what string) (string, error) {
	v := call.Argument(i)
	if s, ok := v.Export().(string); ok {
		if _, isObj := v.(*goja.Object); !isObj {
			return s, nil
		}
	}
	return "", typeErr(fmt.Sprintf("%s must be a string, got %s", what, typeOf(v)))
}

func argObject(call goja.FunctionCall, i int, what string) (*goja.Object, error) {
	v := call.Argument(i)
	o, ok := v.(*goja.Object)
	if !ok || isArray(v) {
		return nil, typeErr(fmt.Sprintf("%s must be an object, got %s", what, typeOf(v)))
	}
	if _, isFn := goja.AssertFunction(v); isFn {
		return nil, typeErr(fmt.Sprintf("%s must be an object, got a function", what))
	}
	return o, nil
}

// ctxObject builds the ctx argument by hand.
func (inv *invocation) ctxObject() *goja.Object {
	rt := inv.rt
	c := rt.NewObject()
	_ = c.Set("user_id", inv.hc.UserID)
	_ = c.Set("chat_id", inv.hc.ChatID)
	_ = c.Set("assistant_id", inv.hc.AssistantID)
	_ = c.Set("checkpoint", inv.checkpointObject(inv.hc.Checkpoint))
	if inv.hc.Sandbox != nil {
		_ = c.Set("sandbox", inv.sandboxObject(inv.hc.Sandbox))
	} else {
		_ = c.Set("sandbox", goja.Null())
	}
	_ = c.Set("SendStream", inv.fn("ctx.SendStream", inv.sendStream))
	_ = c.Set("Replace", inv.fn("ctx.Replace", inv.replace))
	_ = c.Set("End", inv.fn("ctx.End", inv.end))
	req, chat := inv.hc.Stores()
	mem := rt.NewObject()
	_ = mem.Set("context", inv.storeObject("ctx.memory.context", req))
	_ = mem.Set("chat", inv.storeObject("ctx.memory.chat", chat))
	_ = c.Set("memory", mem)
	return c
}

// checkpointObject is ctx.checkpoint: a frozen object, or null.
func (inv *invocation) checkpointObject(cp *hooks.Checkpoint) goja.Value {
	if cp == nil {
		return goja.Null()
	}
	o := inv.rt.NewObject()
	_ = o.Set("id", cp.ID)
	_ = o.Set("label", cp.Label)
	_ = o.Set("restored", cp.Restored)
	_ = o.Set("missing", cp.Missing)
	// Read-only: a hook that assigns to it changes nothing, and in strict
	// mode (TypeScript's output) gets a TypeError.
	if freeze, ok := goja.AssertFunction(inv.rt.Get("Object").ToObject(inv.rt).Get("freeze")); ok {
		_, _ = freeze(goja.Undefined(), o)
	}
	return o
}

// --- UI messages ---

func (inv *invocation) emit(ui *executor.UIMessage) error {
	if inv.hc.Emit == nil {
		return nil
	}
	return inv.live(func() error { return inv.hc.Emit(executor.Event{Kind: executor.EventUI, UI: ui}) })
}

func (inv *invocation) uiMessage(call goja.FunctionCall, i int, fn string) (*executor.UIMessage, error) {
	o, err := argObject(call, i, fn+" message")
	if err != nil {
		return nil, err
	}
	var m struct {
		Type  *string        `json:"type"`
		Props map[string]any `json:"props"`
	}
	if err := inv.toGo(o, &m); err != nil {
		return nil, typeErr(fmt.Sprintf("message must be {type: string, props?: object}: %v", err))
	}
	if m.Type == nil || *m.Type == "" {
		return nil, typeErr("message must have a non-empty string type, e.g. {type: \"loading\", props: {message: \"...\"}}")
	}
	return &executor.UIMessage{Type: *m.Type, Props: m.Props}, nil
}

func (inv *invocation) sendStream(call goja.FunctionCall) (goja.Value, error) {
	m, err := inv.uiMessage(call, 0, "ctx.SendStream(message)")
	if err != nil {
		return nil, err
	}
	inv.uiSeq++
	m.ID = fmt.Sprintf("%s-%d", inv.uiPrefix, inv.uiSeq)
	m.Action = "send"
	if err := inv.emit(m); err != nil {
		return nil, err
	}
	return inv.rt.ToValue(m.ID), nil
}

func (inv *invocation) replace(call goja.FunctionCall) (goja.Value, error) {
	id, err := argString(call, 0, "id")
	if err != nil || id == "" {
		return nil, typeErr("id must be the non-empty string ctx.SendStream returned")
	}
	m, err := inv.uiMessage(call, 1, "ctx.Replace(id, message)")
	if err != nil {
		return nil, err
	}
	m.ID, m.Action = id, "replace"
	return nil, inv.emit(m)
}

func (inv *invocation) end(call goja.FunctionCall) (goja.Value, error) {
	id, err := argString(call, 0, "id")
	if err != nil || id == "" {
		return nil, typeErr("id must be the non-empty string ctx.SendStream returned")
	}
	return nil, inv.emit(&executor.UIMessage{ID: id, Action: "end"})
}

// --- memory ---

func (inv *invocation) storeObject(name string, s hooks.Store) *goja.Object {
	o := inv.rt.NewObject()
	_ = o.Set("Get", inv.fn(name+".Get", func(call goja.FunctionCall) (goja.Value, error) {
		key, err := argString(call, 0, "key")
		if err != nil {
			return nil, err
		}
		raw, ok := s.Get(key)
		if !ok {
			return goja.Undefined(), nil
		}
		return inv.parse(goja.Undefined(), inv.rt.ToValue(string(raw)))
	}))
	_ = o.Set("Has", inv.fn(name+".Has", func(call goja.FunctionCall) (goja.Value, error) {
		key, err := argString(call, 0, "key")
		if err != nil {
			return nil, err
		}
		_, ok := s.Get(key)
		return inv.rt.ToValue(ok), nil
	}))
	_ = o.Set("Set", inv.fn(name+".Set", func(call goja.FunctionCall) (goja.Value, error) {
		key, err := argString(call, 0, "key")
		if err != nil {
			return nil, err
		}
		raw, err := inv.toJSON(call.Argument(1))
		if err != nil {
			return nil, err
		}
		return nil, inv.live(func() error { return s.Set(key, raw) })
	}))
	_ = o.Set("Del", inv.fn(name+".Del", func(call goja.FunctionCall) (goja.Value, error) {
		key, err := argString(call, 0, "key")
		if err != nil {
			return nil, err
		}
		return nil, inv.live(func() error { s.Del(key); return nil })
	}))
	return o
}

// --- ctx.sandbox ---

// spend counts one sandbox call of n bytes against the caps.
func (inv *invocation) spend(n int64) error {
	o := inv.h.opts
	if inv.sandboxCalls >= o.MaxSandboxCalls {
		return fmt.Errorf("more than %d ctx.sandbox calls in one %s invocation (max_sandbox_calls); do the work in fewer calls, e.g. one Exec of a script", o.MaxSandboxCalls, inv.hook)
	}
	if inv.sandboxBytes+n > o.MaxSandboxBytes {
		return fmt.Errorf("ctx.sandbox moved more than %d bytes in one %s invocation (max_sandbox_bytes); read or write less", o.MaxSandboxBytes, inv.hook)
	}
	inv.sandboxCalls++
	inv.sandboxBytes += n
	return nil
}

func (inv *invocation) remainingBytes() int64 {
	return inv.h.opts.MaxSandboxBytes - inv.sandboxBytes
}

func (inv *invocation) sandboxObject(sb executor.Sandbox) *goja.Object {
	rt := inv.rt
	o := rt.NewObject()
	_ = o.Set("workdir", sb.Workdir())
	_ = o.Set("ReadFile", inv.fn("ctx.sandbox.ReadFile", func(call goja.FunctionCall) (goja.Value, error) {
		name, err := argString(call, 0, "path")
		if err != nil {
			return nil, err
		}
		if err := inv.spend(0); err != nil {
			return nil, err
		}
		b, err := sb.ReadFile(inv.ctx, name)
		if err != nil {
			return nil, err
		}
		inv.sandboxCalls-- // counted again with its size
		if err := inv.spend(int64(len(b))); err != nil {
			return nil, err
		}
		return rt.ToValue(string(b)), nil
	}))
	_ = o.Set("WriteFile", inv.fn("ctx.sandbox.WriteFile", func(call goja.FunctionCall) (goja.Value, error) {
		name, err := argString(call, 0, "path")
		if err != nil {
			return nil, err
		}
		content, err := argString(call, 1, "content")
		if err != nil {
			return nil, err
		}
		if err := inv.spend(int64(len(content))); err != nil {
			return nil, err
		}
		return nil, sb.WriteFile(inv.ctx, name, []byte(content))
	}))
	_ = o.Set("ListDir", inv.fn("ctx.sandbox.ListDir", func(call goja.FunctionCall) (goja.Value, error) {
		name, err := argString(call, 0, "path")
		if err != nil {
			return nil, err
		}
		if err := inv.spend(0); err != nil {
			return nil, err
		}
		infos, err := sb.ListDir(inv.ctx, name)
		if err != nil {
			return nil, err
		}
		items := make([]any, len(infos))
		for i, fi := range infos {
			items[i] = inv.fileInfo(fi)
		}
		return rt.NewArray(items...), nil
	}))
	_ = o.Set("Stat", inv.fn("ctx.sandbox.Stat", func(call goja.FunctionCall) (goja.Value, error) {
		name, err := argString(call, 0, "path")
		if err != nil {
			return nil, err
		}
		if err := inv.spend(0); err != nil {
			return nil, err
		}
		fi, err := sb.Stat(inv.ctx, name)
		if err != nil {
			return nil, err
		}
		return inv.fileInfo(fi), nil
	}))
	_ = o.Set("EditFile", inv.fn("ctx.sandbox.EditFile", func(call goja.FunctionCall) (goja.Value, error) {
		name, err := argString(call, 0, "path")
		if err != nil {
			return nil, err
		}
		if !isArray(call.Argument(1)) {
			return nil, typeErr("edits must be an array of edits like [{old: \"a\", new: \"b\"}], got " + typeOf(call.Argument(1)))
		}
		raw, err := inv.toJSON(call.Argument(1))
		if err != nil {
			return nil, err
		}
		var edits []executor.Edit
		dec := jsonDecoder(raw)
		if err := dec.Decode(&edits); err != nil {
			return nil, typeErr(fmt.Sprintf("edits: %v; each edit uses old, new, all, delete, insert, content, from, to", err))
		}
		if err := inv.spend(int64(len(raw))); err != nil {
			return nil, err
		}
		res, err := sb.EditFile(inv.ctx, name, edits)
		if err != nil {
			return nil, err
		}
		return inv.fromGo(res)
	}))
	_ = o.Set("Exec", inv.fn("ctx.sandbox.Exec", func(call goja.FunctionCall) (goja.Value, error) {
		return inv.exec(sb, call)
	}))
	return o
}

func (inv *invocation) fileInfo(fi executor.FileInfo) *goja.Object {
	o := inv.rt.NewObject()
	_ = o.Set("name", fi.Name)
	_ = o.Set("size", fi.Size)
	_ = o.Set("is_dir", fi.IsDir)
	_ = o.Set("mod_time", fi.ModTime.UTC().Format(time.RFC3339Nano))
	return o
}

// capped is a writer that keeps at most max bytes.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

// execOptions is the second argument of ctx.sandbox.Exec (ExecOptions in
// sandbox.d.ts); every field is optional.
type execOptions struct {
	Dir     string            `json:"dir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Stdin   *string           `json:"stdin,omitempty"`
	Timeout float64           `json:"timeout,omitempty"` // milliseconds
}

func (inv *invocation) exec(sb executor.Sandbox, call goja.FunctionCall) (goja.Value, error) {
	argv := call.Argument(0)
	if !isArray(argv) {
		return nil, typeErr(fmt.Sprintf("argv must be an array of strings like [\"ls\", \"-la\"], got %s", typeOf(argv)))
	}
	var args []string
	if err := inv.toGo(argv, &args); err != nil || len(args) == 0 {
		return nil, typeErr("argv must be a non-empty array of strings like [\"ls\", \"-la\"]")
	}
	cmd := &executor.Cmd{Args: args}
	if opt := call.Argument(1); !goja.IsUndefined(opt) && !goja.IsNull(opt) {
		if _, err := argObject(call, 1, "options"); err != nil {
			return nil, err
		}
		var o execOptions
		raw, err := inv.toJSON(opt)
		if err != nil {
			return nil, err
		}
		// Strict, like EditFile: a misspelt option ({cwd: ...}) is an
		// error, not a command run somewhere else.
		if err := jsonDecoder(raw).Decode(&o); err != nil {
			return nil, typeErr(fmt.Sprintf("options must be {dir?: string, env?: {NAME: string}, stdin?: string, timeout?: ms}: %v", err))
		}
		cmd.Dir = o.Dir
		for k, v := range o.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if o.Stdin != nil {
			cmd.Stdin = strings.NewReader(*o.Stdin)
		}
		cmd.Timeout = time.Duration(o.Timeout * float64(time.Millisecond))
	}
	var stdinLen int64
	if r, ok := cmd.Stdin.(*strings.Reader); ok {
		stdinLen = r.Size()
	}
	if err := inv.spend(stdinLen); err != nil {
		return nil, err
	}
	limit := min(inv.remainingBytes(), maxExecOutput)
	if limit <= 0 {
		limit = 1
	}
	if dl, ok := inv.ctx.Deadline(); ok {
		if left := time.Until(dl); cmd.Timeout <= 0 || cmd.Timeout > left {
			cmd.Timeout = max(left, time.Millisecond)
		}
	}
	stdout, stderr := &capped{max: int(limit)}, &capped{max: int(limit)}
	cmd.Stdout, cmd.Stderr, cmd.MaxOutput = stdout, stderr, limit
	if c := inv.inCall.Load(); c != nil {
		// The command is what a stuck Exec's error should name.
		inv.inCall.Store(&builtinCall{name: fmt.Sprintf("%s(%s)", c.name, truncate(strconv.QuoteToASCII(strings.Join(args, " ")), 200)), start: c.start})
	}
	res, err := sb.Exec(inv.ctx, cmd)
	inv.sandboxBytes += int64(stdout.buf.Len() + stderr.buf.Len())
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, &ExitError{Args: args, ExitCode: res.ExitCode, Signal: res.Signal, Stdout: stdout.buf.String(), Stderr: stderr.buf.String()}
	}
	return inv.rt.ToValue(stdout.buf.String()), nil
}
