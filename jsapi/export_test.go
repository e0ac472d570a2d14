package jsapi

import "reflect"

// ExecOptionsType lets the external tests compare ctx.sandbox.Exec's
// options with sandbox.d.ts.
var ExecOptionsType = reflect.TypeFor[execOptions]()

// Runaway is how many abandoned invocations of h are still running.
func Runaway(h *Hooks) int64 { return h.runaway.Load() }
