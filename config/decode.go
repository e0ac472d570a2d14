package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// decoder reports problems for one file while its values are read.
type decoder struct {
	file string
	ps   *problems
}

func newDecoder(file string, ps *problems) *decoder {
	return &decoder{file: file, ps: ps}
}

// report adds a problem at n (nil: the whole file).
func (d *decoder) report(sev Severity, n *node, path, hint, format string, args ...any) {
	p := Problem{File: d.file, Path: path, Message: fmt.Sprintf(format, args...), Hint: hint, Severity: sev}
	if n != nil {
		p.Line, p.Col = n.line, n.col
	}
	d.ps.add(p)
}

func (d *decoder) errorf(n *node, path, hint, format string, args ...any) {
	d.report(SeverityError, n, path, hint, format, args...)
}

func (d *decoder) warnf(n *node, path, hint, format string, args ...any) {
	d.report(SeverityWarning, n, path, hint, format, args...)
}

// syntax reports a parse failure.
func (d *decoder) syntax(err *syntaxError, what string) {
	d.ps.add(Problem{File: d.file, Line: err.line, Col: err.col, Message: what + ": " + err.msg,
		Hint: "fix the syntax at this position", Severity: SeverityError})
}

// wrongType reports a value of the wrong type.
func (d *decoder) wrongType(n *node, path, want, example string) {
	hint := ""
	if example != "" {
		hint = "write " + want + ", e.g. " + example
	}
	switch n.kind {
	case kindObject, kindArray, kindNull:
		d.errorf(n, path, hint, "is %s, want %s", n.kind, want)
	default:
		d.errorf(n, path, hint, "%s is %s, want %s", describe(n), n.kind, want)
	}
}

// object checks that n is an object whose keys are all in known; unknown
// keys are reported with the closest known key. It reports false when n
// is not an object.
func (d *decoder) object(n *node, path string, known []string) bool {
	if n.kind != kindObject {
		d.wrongType(n, path, "an object", "{...}")
		return false
	}
	for _, m := range n.members {
		if contains(known, m.key) {
			continue
		}
		hint := suggest(m.key, known)
		if hint == "" {
			hint = "remove it; known keys: " + strings.Join(sorted(known), ", ")
		}
		d.errorf(m.val, joinPath(path, m.key), hint, "unknown key")
	}
	return true
}

func (d *decoder) str(n *node, path, example string) (string, bool) {
	if n.kind != kindString {
		d.wrongType(n, path, "a string", example)
		return "", false
	}
	return n.str, true
}

func (d *decoder) number(n *node, path, example string) (float64, bool) {
	if n.kind != kindNumber {
		d.wrongType(n, path, "a number", example)
		return 0, false
	}
	f, err := strconv.ParseFloat(n.str, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		d.errorf(n, path, "write a finite number, e.g. "+example, "%s is not a number", n.str)
		return 0, false
	}
	return f, true
}

func (d *decoder) integer(n *node, path, example string) (int64, bool) {
	if n.kind != kindNumber {
		d.wrongType(n, path, "an integer", example)
		return 0, false
	}
	i, err := strconv.ParseInt(n.str, 10, 64)
	if err != nil {
		d.errorf(n, path, "write a whole number, e.g. "+example, "%s is not an integer", n.str)
		return 0, false
	}
	return i, true
}

func (d *decoder) boolean(n *node, path string) (bool, bool) {
	if n.kind != kindBool {
		d.wrongType(n, path, "a boolean", "true")
		return false, false
	}
	return n.boolean, true
}

// strings reads an array of strings.
func (d *decoder) strings(n *node, path, example string) ([]string, bool) {
	if n.kind != kindArray {
		d.wrongType(n, path, "an array of strings", example)
		return nil, false
	}
	out := make([]string, 0, len(n.items))
	ok := true
	for i, it := range n.items {
		s, good := d.str(it, indexPath(path, i), `"name"`)
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// stringMap reads an object of strings.
func (d *decoder) stringMap(n *node, path string) (map[string]string, bool) {
	if n.kind != kindObject {
		d.wrongType(n, path, "an object of strings", `{"KEY": "value"}`)
		return nil, false
	}
	out := make(map[string]string, len(n.members))
	ok := true
	for _, m := range n.members {
		s, good := d.str(m.val, joinPath(path, m.key), `"value"`)
		ok = ok && good
		out[m.key] = s
	}
	return out, ok
}

// oneOf reads a string that must be one of allowed.
func (d *decoder) oneOf(n *node, path string, allowed []string) (string, bool) {
	s, ok := d.str(n, path, strconv.Quote(allowed[0]))
	if !ok {
		return "", false
	}
	if contains(allowed, s) {
		return s, true
	}
	hint := "use " + quoteList(allowed)
	if sg := suggest(s, allowed); sg != "" {
		hint = sg + " (" + hint + ")"
	}
	d.errorf(n, path, hint, "unknown value %q", s)
	return "", false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sorted(list []string) []string {
	out := append([]string(nil), list...)
	sort.Strings(out)
	return out
}

// quoteList renders ["a","b","c"] as "a", "b" or "c".
func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
