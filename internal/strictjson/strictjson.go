// Package strictjson reads a JSON request body once, in the one way that
// every reasonable decoder agrees on, or refuses it.
//
// A gateway that routes a request on a field of its body ("model") and
// then hands the body to another handler has two readers of one body. JSON
// leaves room for them to disagree: duplicate names (Go's encoding/json
// keeps the last, gjson and many others the first), names that differ only
// in case (encoding/json matches struct fields case-insensitively, with
// Unicode folding: "ſandbox" is "sandbox" to it), invalid UTF-8 (replaced
// by some readers, kept by others), data after the value, byte order
// marks, comments. Read accepts only a body on which they cannot disagree:
// one JSON object (RFC 8259, nothing before or after it but whitespace),
// valid UTF-8, no name twice in any object at any depth (compared after
// unescaping, so "mod\u0065l" is "model"), no top-level name that folds to
// one of the caller's names without being it, nesting bounded.
//
// The reading is github.com/go-json-experiment/json's jsontext, the
// implementation of encoding/json/v2, which is strict in exactly these ways
// by default; values are decoded with its json package, which matches
// names case-sensitively.
//
// Functions here are safe for concurrent use; an Object is read-only.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DefaultMaxDepth bounds the nesting of objects and arrays. Recursive
// readers (gjson among them) overflow the stack on bodies nested millions
// deep; no request of the APIs served here nests anywhere near this.
const DefaultMaxDepth = 512

// Error is a body that Read refused: Reason says what is wrong with it
// ("it ...") and how to fix it; Name is the member at fault, when one is
// known: a top-level name, or a path such as messages[0].role.
type Error struct {
	Name   string
	Offset int64
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// Object is a body read by Read: its top-level members by exact name,
// each value the body's own bytes (validated, not copied).
type Object struct {
	body    []byte
	members map[string]jsontext.Value
	order   []string
}

// Options tune Read.
type Options struct {
	// Names are the top-level members the caller reads, routes or
	// authorizes on. A member whose name folds to one of them (case,
	// Unicode simple folding, '-' and '_' ignored) without being it is
	// refused: some decoder behind the caller would read it as that
	// member.
	Names []string
	// MaxDepth bounds nesting (default DefaultMaxDepth).
	MaxDepth int
}

// Read reads body as one JSON object, or refuses it with an *Error.
func Read(body []byte, o Options) (*Object, error) {
	depth := o.MaxDepth
	if depth <= 0 {
		depth = DefaultMaxDepth
	}
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) {
		return nil, &Error{Reason: "it starts with a byte order mark; send JSON without one"}
	}
	if !depthOK(body, depth) {
		return nil, &Error{Reason: fmt.Sprintf("it nests deeper than %d levels of objects and arrays", depth)}
	}
	dec := jsontext.NewDecoder(bytes.NewBuffer(body))
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, syntaxError(dec, err)
	}
	if tok.Kind() != '{' {
		return nil, &Error{Reason: "it is not a JSON object; send one object"}
	}
	obj := &Object{body: body, members: map[string]jsontext.Value{}}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, syntaxError(dec, err)
		}
		name := tok.String()
		if twin := foldTwin(name, o.Names); twin != "" {
			return nil, &Error{Name: clip(name), Offset: dec.InputOffset(),
				Reason: fmt.Sprintf("the member %q differs from %q only in case or punctuation; send %q once, spelled exactly", clip(name), twin, twin)}
		}
		v, err := dec.ReadValue()
		if err != nil {
			return nil, syntaxError(dec, err)
		}
		end := dec.InputOffset()
		obj.members[name] = jsontext.Value(body[end-int64(len(v)) : end])
		obj.order = append(obj.order, name)
	}
	if _, err := dec.ReadToken(); err != nil { // the closing brace
		return nil, syntaxError(dec, err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, &Error{Offset: dec.InputOffset(), Reason: "it has data after its JSON object; send one object and nothing after it"}
	}
	return obj, nil
}

// depthOK reports whether b nests arrays and objects at most max deep, in
// one pass that skips strings. It runs before the decoder, whose own bound
// (10000) is far above what recursive readers downstream survive.
func depthOK(b []byte, max int) bool {
	depth, inStr, esc := 0, false, false
	for _, c := range b {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '[' || c == '{':
			if depth++; depth > max {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}

// syntaxError turns the decoder's error into an *Error that says what was
// found where. jsontext reports a duplicate name, invalid UTF-8, a
// truncated body, a comment or a bad character with its offset.
func syntaxError(dec *jsontext.Decoder, err error) *Error {
	off := dec.InputOffset()
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		off = se.ByteOffset
		if errors.Is(se.Err, jsontext.ErrDuplicateName) {
			name, where := se.JSONPointer.LastToken(), string(se.JSONPointer.Parent())
			if where == "" {
				where = "the top level"
			}
			return &Error{Offset: off, Name: topName(se.JSONPointer),
				Reason: fmt.Sprintf("it has the name %q twice in one object (at %s); send each name once", clip(name), clip(where))}
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Offset: off, Reason: "it ends before its JSON object does; send the whole object"}
	}
	msg := strings.TrimPrefix(err.Error(), "jsontext: ")
	return &Error{Offset: off, Reason: msg + "; send strict JSON: each name once per object, valid UTF-8, no comments"}
}

// topName is the top-level member p points into.
func topName(p jsontext.Pointer) string {
	for tok := range p.Tokens() {
		return clip(tok)
	}
	return ""
}

// foldTwin returns the name of names that name folds to without being
// it, or "".
func foldTwin(name string, names []string) string {
	folded := fold(name)
	for _, n := range names {
		if n != name && fold(n) == folded {
			return n
		}
	}
	return ""
}

// fold is name without '-' and '_', in Unicode simple case folding: what
// encoding/json's case-insensitive matching and its relatives (v2's
// case:ignore drops the punctuation too) see as the same name.
func fold(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r == '-' || r == '_' {
			continue
		}
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// foldRune maps r to the smallest rune of its simple fold orbit, so that
// runes that fold together ('K', 'k', KELVIN SIGN; 's', 'S', LONG S) map
// to one.
func foldRune(r rune) rune {
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	return min
}

// clip shortens a name for an error message.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Has reports whether the object has the member name.
func (o *Object) Has(name string) bool {
	_, ok := o.members[name]
	return ok
}

// Raw is the member's value as the body holds it, or nil.
func (o *Object) Raw(name string) jsontext.Value { return o.members[name] }

// Names are the object's member names in body order.
func (o *Object) Names() []string { return o.order }

// String returns the member name as a string: ok is false when it is
// absent, and an *Error says so when it is there but not a string (null
// included).
func (o *Object) String(name string) (s string, ok bool, err error) {
	v, ok := o.members[name]
	if !ok {
		return "", false, nil
	}
	if v.Kind() != '"' {
		return "", true, &Error{Name: name, Reason: fmt.Sprintf("%s must be a string", name)}
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return "", true, &Error{Name: name, Reason: fmt.Sprintf("%s: %v", name, err)}
	}
	return s, true, nil
}

// Decode decodes the member name into v (json v2: names matched exactly,
// unknown ones ignored); an absent member leaves v as it is.
func (o *Object) Decode(name string, v any) error {
	raw, ok := o.members[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		e := decodeError(err)
		e.Name = name
		return e
	}
	return nil
}

// decodeError is json's error as an *Error.
func decodeError(err error) *Error { return decodeErrorAt("", err) }

// decodeErrorAt is decodeError for a value that is member at of a body
// ("" for the body itself).
func decodeErrorAt(at string, err error) *Error {
	var se *json.SemanticError
	if errors.As(err, &se) && errors.Is(se.Err, json.ErrUnknownName) && se.JSONPointer != "" {
		name := memberPath(at, se.JSONPointer)
		return &Error{Name: name, Offset: se.ByteOffset, Reason: fmt.Sprintf("it has a member %s that this request does not take", name)}
	}
	if errors.As(err, &se) && se.Err == nil && se.JSONKind != 0 {
		// A value of the wrong kind: said in JSON's words, not Go's. A
		// value of the right kind that still failed (1.5 for an integer)
		// keeps the decoder's reason: want then begins with got's words
		// ("a number (an integer)", "a number").
		got, want := kindNames[se.JSONKind], wants(se.GoType)
		if name := memberPath(at, se.JSONPointer); name != "" && want != "" && got != "" && !strings.HasPrefix(want, got) {
			return &Error{Name: name, Offset: se.ByteOffset, Reason: fmt.Sprintf("%s is %s; send %s", name, got, want)}
		}
	}
	return &Error{Name: at, Reason: strings.TrimPrefix(err.Error(), "json: ")}
}

// UnmarshalAt decodes raw, the value of member at of a body (a path such
// as input or messages[0]), into v, as Object.Into does a whole body:
// members v has no field for are ignored, and an error is an *Error that
// names the member at fault from at.
func UnmarshalAt(at string, raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return decodeErrorAt(at, err)
	}
	return nil
}

// KindName names the kind of a JSON value as an error message says it
// ("a string", "an object", "null").
func KindName(k jsontext.Kind) string { return kindNames[k] }

// kindNames names the kinds of JSON values.
var kindNames = map[jsontext.Kind]string{
	'n': "null", 'f': "a boolean", 't': "a boolean", '"': "a string", '0': "a number", '{': "an object", '[': "an array",
}

// wants says which JSON value decodes into Go type t, or "" when any does.
func wants(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a number (an integer)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return ""
}

// memberPath writes a JSON pointer within member at (a path, or "" for
// the body) as APIs name a member in their errors: /messages/0/role as
// messages[0].role.
func memberPath(at string, p jsontext.Pointer) string {
	var b strings.Builder
	b.WriteString(at)
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			fmt.Fprintf(&b, "[%s]", tok)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// Into decodes the whole object into v (json v2: names matched exactly,
// members v has no field for ignored).
func (o *Object) Into(v any) error {
	if err := json.Unmarshal(o.body, v); err != nil {
		return decodeError(err)
	}
	return nil
}

// Unmarshal reads body with Read and decodes it into v, refusing members
// v has no field for (json v2: names matched exactly).
func Unmarshal(body []byte, v any, o Options) error {
	if _, err := Read(body, o); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v, json.RejectUnknownMembers(true)); err != nil {
		return decodeError(err)
	}
	return nil
}
