package openairesponses

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/tidwall/gjson"
)

// The request body is read once, front to back, by jsontext's streaming
// decoder: a 64 KB request is mostly message and command-output text,
// which passes to the upstream unchanged, so its strings are kept as they
// are in the body (slices of it, still escaped) and written out again
// without being unescaped and escaped (BenchmarkDecodeRequest,
// BenchmarkTranslation). The values are read as gjson read them before: a
// repeated name's first value wins, a non-array where a list is expected
// is a list of itself, a scalar where a string is expected is its JSON
// text, and invalid UTF-8 becomes U+FFFD in what is sent on.

// body is a request body's values as the translation reads them: slices
// of the body, nil when absent.
type body struct {
	model, stream, maxOutput, parallel, effort, temperature, topP, instructions, choice jsontext.Value
	tools                                                                               []toolSpec
	// inputText is input when it is a string, else input is its items.
	inputText jsontext.Value
	input     []itemSpec
}

// itemSpec is one input item.
type itemSpec struct {
	typ, role, callID, name, namespace, arguments, input jsontext.Value
	// contentText is content when it is a string, else content is its
	// parts; outputText and output are the same for output.
	contentText, outputText jsontext.Value
	content, output         []partSpec
	tools                   []toolSpec
}

// partSpec is one content part of a message or a call's output.
type partSpec struct{ typ, text, refusal, imageURL, filename jsontext.Value }

// toolSpec is one tool of the request or of a tool search's output.
type toolSpec struct {
	typ, name, description, parameters, execution jsontext.Value
	// definition and syntax are a custom tool's format.
	definition, syntax jsontext.Value
	tools              []toolSpec // a namespace's members
}

// The names each object is read for; the others are skipped.
var (
	bodyNames      = []string{"model", "stream", "max_output_tokens", "parallel_tool_calls", "reasoning", "temperature", "top_p", "instructions", "tools", "tool_choice", "input"}
	reasoningNames = []string{"effort"}
	itemNames      = []string{"type", "role", "call_id", "name", "namespace", "arguments", "input", "content", "output", "tools"}
	partNames      = []string{"type", "text", "refusal", "image_url", "filename"}
	toolNames      = []string{"type", "name", "description", "parameters", "execution", "format", "tools"}
	formatNames    = []string{"definition", "syntax"}
)

// reader is a decoder over a body, whose values are returned as slices of
// the body.
type reader struct {
	dec *jsontext.Decoder
	raw []byte
}

// readBody reads a request body, or says it is not one JSON value.
func readBody(raw []byte) (*body, error) {
	d := &reader{dec: jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)), raw: raw}
	var b body
	err := d.object(bodyNames, func(name string) (err error) {
		switch name {
		case "model":
			b.model, err = d.value()
		case "stream":
			b.stream, err = d.value()
		case "max_output_tokens":
			b.maxOutput, err = d.value()
		case "parallel_tool_calls":
			b.parallel, err = d.value()
		case "reasoning":
			err = d.object(reasoningNames, func(string) (err error) { b.effort, err = d.value(); return err })
		case "temperature":
			b.temperature, err = d.value()
		case "top_p":
			b.topP, err = d.value()
		case "instructions":
			b.instructions, err = d.value()
		case "tool_choice":
			b.choice, err = d.value()
		case "tools":
			err = d.list(func() error { t, err := d.tool(); b.tools = append(b.tools, t); return err })
		case "input":
			if d.dec.PeekKind() == '"' {
				b.inputText, err = d.value()
				return err
			}
			err = d.list(func() error { it, err := d.item(); b.input = append(b.input, it); return err })
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	return &b, nil
}

// item reads one input item.
func (d *reader) item() (itemSpec, error) {
	var it itemSpec
	err := d.object(itemNames, func(name string) (err error) {
		switch name {
		case "type":
			it.typ, err = d.value()
		case "role":
			it.role, err = d.value()
		case "call_id":
			it.callID, err = d.value()
		case "name":
			it.name, err = d.value()
		case "namespace":
			it.namespace, err = d.value()
		case "arguments":
			it.arguments, err = d.value()
		case "input":
			it.input, err = d.value()
		case "content":
			if d.dec.PeekKind() == '"' {
				it.contentText, err = d.value()
				return err
			}
			err = d.list(func() error { p, err := d.part(); it.content = append(it.content, p); return err })
		case "output":
			if d.dec.PeekKind() == '"' {
				it.outputText, err = d.value()
				return err
			}
			err = d.list(func() error { p, err := d.part(); it.output = append(it.output, p); return err })
		case "tools":
			err = d.list(func() error { t, err := d.tool(); it.tools = append(it.tools, t); return err })
		}
		return err
	})
	return it, err
}

// part reads one content part.
func (d *reader) part() (partSpec, error) {
	var p partSpec
	err := d.object(partNames, func(name string) (err error) {
		switch name {
		case "type":
			p.typ, err = d.value()
		case "text":
			p.text, err = d.value()
		case "refusal":
			p.refusal, err = d.value()
		case "image_url":
			p.imageURL, err = d.value()
		case "filename":
			p.filename, err = d.value()
		}
		return err
	})
	return p, err
}

// tool reads one tool, a namespace's members included.
func (d *reader) tool() (toolSpec, error) {
	var t toolSpec
	err := d.object(toolNames, func(name string) (err error) {
		switch name {
		case "type":
			t.typ, err = d.value()
		case "name":
			t.name, err = d.value()
		case "description":
			t.description, err = d.value()
		case "parameters":
			t.parameters, err = d.value()
		case "execution":
			t.execution, err = d.value()
		case "format":
			err = d.object(formatNames, func(name string) (err error) {
				if name == "definition" {
					t.definition, err = d.value()
				} else {
					t.syntax, err = d.value()
				}
				return err
			})
		case "tools":
			err = d.list(func() error { m, err := d.tool(); t.tools = append(t.tools, m); return err })
		}
		return err
	})
	return t, err
}

// value reads the next value as a slice of the body, capped so that an
// append to it never writes into the body.
func (d *reader) value() (jsontext.Value, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	end := int(d.dec.InputOffset())
	return jsontext.Value(d.raw[end-len(v) : end : end]), nil
}

// object reads an object, calling read for the first member of each of
// names; read reads the member's value. Other members are skipped, and so
// is a value that is not an object (it has no members).
func (d *reader) object(names []string, read func(name string) error) error {
	if d.dec.PeekKind() != '{' {
		return d.dec.SkipValue()
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return err
	}
	var seen uint64
	for d.dec.PeekKind() != '}' {
		n, err := d.dec.ReadValue()
		if err != nil {
			return err
		}
		i := nameIndex(names, n)
		if i < 0 || seen&(1<<i) != 0 {
			if err := d.dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		seen |= 1 << i
		if err := read(names[i]); err != nil {
			return err
		}
	}
	_, err := d.dec.ReadToken()
	return err
}

// list reads a list, calling elem for each element: an array's elements,
// nothing for null, the value itself for anything else (gjson's Array).
func (d *reader) list(elem func() error) error {
	switch d.dec.PeekKind() {
	case 'n':
		return d.dec.SkipValue()
	case '[':
		if _, err := d.dec.ReadToken(); err != nil {
			return err
		}
		for d.dec.PeekKind() != ']' {
			if err := elem(); err != nil {
				return err
			}
		}
		_, err := d.dec.ReadToken()
		return err
	}
	return elem()
}

// nameIndex is the index in names of the quoted member name n, or -1.
func nameIndex(names []string, n jsontext.Value) int {
	s := n[1 : len(n)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		s, _ = jsontext.AppendUnquote(nil, n)
	}
	for i, name := range names {
		if string(s) == name {
			return i
		}
	}
	return -1
}

// asString is v as gjson's String read it: a string's text, null's or an
// absent value's "", any other value's JSON.
func asString(v jsontext.Value) string {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1])
	}
	if len(v) == 0 {
		return ""
	}
	return gjson.ParseBytes(v).String()
}

// names are the values a type or role takes, which asName returns
// without a copy.
var names = []string{"message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
	"tool_search_call", "tool_search_output", "reasoning", "user", "assistant", "developer", "system",
	"input_text", "output_text", "text", "summary_text", "refusal", "input_image", "input_file",
	"function", "custom", "namespace", "tool_search", "client"}

// asName is asString for a type or role.
func asName(v jsontext.Value) string {
	if len(v) >= 2 && v[0] == '"' {
		for _, n := range names {
			if string(v[1:len(v)-1]) == n {
				return n
			}
		}
	}
	return asString(v)
}

// asBool is v as gjson's Bool read it.
func asBool(v jsontext.Value) bool {
	if len(v) == 0 {
		return false
	}
	return gjson.ParseBytes(v).Bool()
}

// asInt is v as gjson's Int read it.
func asInt(v jsontext.Value) int64 {
	if len(v) == 0 {
		return 0
	}
	return gjson.ParseBytes(v).Int()
}

// asFloat is v as gjson's Float read it.
func asFloat(v jsontext.Value) float64 { return gjson.ParseBytes(v).Float() }

// isNumber says whether v is a number.
func isNumber(v jsontext.Value) bool { return len(v) > 0 && v.Kind() == '0' }

// member is the member name of object v, as a string.
func member(v jsontext.Value, name string) string { return gjson.GetBytes(v, name).String() }

// jstr is a text as a quoted JSON string of valid UTF-8, as it is written
// to the upstream.
type jstr = jsontext.Value

// text is v as a jstr: a string as it is in the body (with invalid UTF-8
// or a lone surrogate escape replaced), any other value as asString reads
// it.
func text(v jsontext.Value) jstr {
	if len(v) > 0 && v[0] == '"' {
		if utf8.Valid(v) && !hasSurrogate(v) {
			return v
		}
		return quote(gjson.ParseBytes(v).String())
	}
	return quote(asString(v))
}

// hasSurrogate says whether the quoted string v may escape a UTF-16
// surrogate (\ud800 to \udfff), which a lone one needs replacing.
func hasSurrogate(v []byte) bool {
	for {
		i := bytes.Index(v, []byte(`\u`))
		if i < 0 || i+3 >= len(v) {
			return false
		}
		if c, d := v[i+2]|0x20, v[i+3]|0x20; c == 'd' && d >= '8' && d <= 'f' && (d <= '9' || d >= 'a') {
			return true
		}
		v = v[i+2:]
	}
}

// quote is s as a jstr.
func quote(s string) jstr {
	q, _ := jsontext.AppendQuote(make([]byte, 0, len(s)+2), s) // invalid UTF-8 becomes U+FFFD
	return q
}

// unquote is j's text.
func unquote(j jstr) string {
	if bytes.IndexByte(j, '\\') < 0 {
		return string(j[1 : len(j)-1])
	}
	s, _ := jsontext.AppendUnquote(nil, j)
	return string(s)
}

// emptyText says whether j is "".
func emptyText(j jstr) bool { return len(j) <= 2 }

// blank says whether j's text is white space only.
func blank(j jstr) bool {
	for _, c := range j[1 : len(j)-1] {
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case c == '\\' || c >= utf8.RuneSelf:
			return strings.TrimSpace(unquote(j)) == ""
		default:
			return false
		}
	}
	return true
}

// joinText joins texts with sep between them, as one jstr; the texts'
// escapes are kept as they are.
func joinText(texts []jstr, sep string) jstr {
	if len(texts) == 1 {
		return texts[0]
	}
	q := quote(sep)
	sepIn := q[1 : len(q)-1]
	n := 2
	for _, t := range texts {
		n += len(t) - 2 + len(sepIn)
	}
	out := make([]byte, 0, n)
	out = append(out, '"')
	for i, t := range texts {
		if i > 0 {
			out = append(out, sepIn...)
		}
		out = append(out, t[1:len(t)-1]...)
	}
	return append(out, '"')
}
