package jsapi

import "reflect"

// ExecOptionsType lets the external tests compare ctx.sandbox.Exec's
// options with sandbox.d.ts.
var ExecOptionsType = reflect.TypeFor[execOptions]()
