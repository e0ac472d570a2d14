package jsapi

import (
	"math"
	"strconv"
	"strings"

	"github.com/dop251/goja"
	"github.com/hashicorp/go-hclog"
)

// maxLogLine caps one log line (bytes).
const maxLogLine = 16 << 10

// logObject builds the global log: log.Trace/Debug/Info/Warn/Error(format,
// ...args) with printf-style verbs (%s %d %i %f %v %j %o %O %%).
func (inv *invocation) logObject() *goja.Object {
	o := inv.rt.NewObject()
	for name, lvl := range map[string]hclog.Level{
		"Trace": hclog.Trace, "Debug": hclog.Debug, "Info": hclog.Info, "Warn": hclog.Warn, "Error": hclog.Error,
	} {
		_ = o.Set(name, inv.fn("log."+name, inv.printer(lvl)))
	}
	return o
}

// consoleObject builds console.log/info/debug/warn/error over the same
// logger (goja_nodejs's console shape, with hclog as its printer).
func (inv *invocation) consoleObject() *goja.Object {
	o := inv.rt.NewObject()
	for name, lvl := range map[string]hclog.Level{
		"log": hclog.Info, "info": hclog.Info, "debug": hclog.Debug, "trace": hclog.Trace, "warn": hclog.Warn, "error": hclog.Error,
	} {
		_ = o.Set(name, inv.fn("console."+name, inv.printer(lvl)))
	}
	return o
}

func (inv *invocation) printer(lvl hclog.Level) func(goja.FunctionCall) (goja.Value, error) {
	return func(call goja.FunctionCall) (goja.Value, error) {
		if inv.log.GetLevel() > lvl {
			// A disabled level formats nothing (and runs no toJSON).
			return nil, nil
		}
		inv.logLines++
		switch max := inv.h.opts.MaxLogLines; {
		case inv.logLines == max+1:
			inv.log.Warn("hook log output capped; further lines of this invocation are dropped", "max_log_lines", max)
			return nil, nil
		case inv.logLines > max:
			return nil, nil
		}
		inv.log.Log(lvl, inv.format(call.Arguments))
		return nil, nil
	}
}

// format renders console arguments: a leading string is a printf-style
// format; other arguments are appended, separated by spaces.
func (inv *invocation) format(args []goja.Value) string {
	var b strings.Builder
	rest := args
	if len(args) > 0 {
		if f, ok := args[0].Export().(string); ok {
			if _, isObj := args[0].(*goja.Object); !isObj {
				rest = args[1:]
				for i := 0; i < len(f) && b.Len() < maxLogLine; i++ {
					c := f[i]
					if c != '%' || i+1 == len(f) {
						b.WriteByte(c)
						continue
					}
					verb := f[i+1]
					if verb == '%' {
						b.WriteByte('%')
						i++
						continue
					}
					if !strings.ContainsRune("sdifvjoO", rune(verb)) || len(rest) == 0 {
						b.WriteByte(c)
						continue
					}
					i++
					b.WriteString(inv.verb(verb, rest[0]))
					rest = rest[1:]
				}
			}
		}
	}
	for _, a := range rest {
		if b.Len() >= maxLogLine {
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(inv.display(a))
	}
	return truncate(b.String(), maxLogLine)
}

func (inv *invocation) verb(verb byte, v goja.Value) string {
	switch verb {
	case 'd', 'i':
		f := v.ToFloat()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
		return strconv.FormatFloat(math.Trunc(f), 'f', -1, 64)
	case 'f':
		return strconv.FormatFloat(v.ToFloat(), 'f', -1, 64)
	case 'j', 'o', 'O':
		return inv.jsonText(v)
	default:
		return inv.display(v)
	}
}

// display renders one value: strings as they are, errors as
// "Name: message", objects as JSON; it never calls a script's toString.
func (inv *invocation) display(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	}
	obj, ok := v.(*goja.Object)
	if !ok {
		return truncate(v.String(), maxLogLine)
	}
	if _, isFn := goja.AssertFunction(v); isFn {
		return "[Function]"
	}
	if obj.ClassName() == "Error" {
		name, msg := inv.ownString(obj, "name"), inv.ownString(obj, "message")
		if name == "" {
			name = "Error"
		}
		return name + ": " + msg
	}
	return inv.jsonText(v)
}

func (inv *invocation) jsonText(v goja.Value) string {
	s, err := inv.stringify(goja.Undefined(), v)
	if err != nil {
		if inv.ctx.Err() != nil {
			panic(err) // the budget is gone: unwind the script
		}
		return "[unserializable " + typeOf(v) + "]"
	}
	if goja.IsUndefined(s) {
		return "undefined"
	}
	return truncate(s.String(), maxLogLine)
}
