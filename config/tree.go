package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/tailscale/hujson"
)

// kind is the type of a value in a parsed JSONC or YAML document.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

func (k kind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an object", "an array"}[k]
}

// node is one value of a JSONC or YAML document with its position, so that
// both formats share one strict decoder. For an object member, line and
// col are those of the key: that is where an editor should jump.
type node struct {
	kind      kind
	str       string // string value, or the literal text of a number
	boolean   bool
	members   []member
	items     []*node
	line, col int
}

type member struct {
	key string
	val *node
}

// get returns the member named key, or nil.
func (n *node) get(key string) *node {
	for _, m := range n.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// syntaxError is a parse failure with its position.
type syntaxError struct {
	line, col int
	msg       string
}

func (e *syntaxError) Error() string { return e.msg }

var hujsonErrRE = regexp.MustCompile(`^hujson: line (\d+), column (\d+): (.*)$`)

// parseJSONC parses JSONC (comments and trailing commas allowed).
func parseJSONC(src []byte) (*node, *syntaxError) {
	v, err := hujson.Parse(src)
	if err != nil {
		if m := hujsonErrRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			col, _ := strconv.Atoi(m[2])
			return nil, &syntaxError{line: line, col: col, msg: m[3]}
		}
		return nil, &syntaxError{line: 1, col: 1, msg: err.Error()}
	}
	lines := lineStarts(src)
	return fromHujson(src, lines, &v, -1)
}

// lineStarts returns the offset at which each line begins.
func lineStarts(src []byte) []int {
	starts := []int{0}
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// position converts a byte offset into a 1-based line and rune column.
func position(src []byte, lines []int, off int) (int, int) {
	lo, hi := 0, len(lines)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if lines[mid] <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo + 1, utf8.RuneCount(src[lines[lo]:off]) + 1
}

// fromHujson converts v; keyOff is the offset of the member key holding
// v, or -1.
func fromHujson(src []byte, lines []int, v *hujson.Value, keyOff int) (*node, *syntaxError) {
	off := v.StartOffset
	if keyOff >= 0 {
		off = keyOff
	}
	n := &node{}
	n.line, n.col = position(src, lines, off)
	switch t := v.Value.(type) {
	case *hujson.Object:
		n.kind = kindObject
		seen := map[string]bool{}
		for i := range t.Members {
			m := &t.Members[i]
			key := m.Name.Value.(hujson.Literal).String()
			if seen[key] {
				l, c := position(src, lines, m.Name.StartOffset)
				return nil, &syntaxError{line: l, col: c, msg: fmt.Sprintf("duplicate key %q", key)}
			}
			seen[key] = true
			child, err := fromHujson(src, lines, &m.Value, m.Name.StartOffset)
			if err != nil {
				return nil, err
			}
			n.members = append(n.members, member{key: key, val: child})
		}
	case *hujson.Array:
		n.kind = kindArray
		for i := range t.Elements {
			child, err := fromHujson(src, lines, &t.Elements[i], -1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, child)
		}
	case hujson.Literal:
		switch t.Kind() {
		case 'n':
			n.kind = kindNull
		case 't', 'f':
			n.kind, n.boolean = kindBool, t.Bool()
		case '0':
			n.kind, n.str = kindNumber, string(t)
		case '"':
			n.kind, n.str = kindString, t.String()
		}
	}
	return n, nil
}

// parseYAML parses one YAML document. lineOffset is added to every line
// (for front matter that starts below the top of its file).
func parseYAML(src []byte, lineOffset int) (*node, *syntaxError) {
	f, err := parser.ParseBytes(src, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			p := ye.GetToken().Position
			return nil, &syntaxError{line: p.Line + lineOffset, col: p.Column, msg: ye.GetMessage()}
		}
		return nil, &syntaxError{line: 1 + lineOffset, col: 1, msg: err.Error()}
	}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return &node{kind: kindNull, line: 1 + lineOffset, col: 1}, nil
	}
	if len(f.Docs) > 1 {
		return nil, &syntaxError{line: 1 + lineOffset, col: 1, msg: "more than one YAML document"}
	}
	return fromYAML(f.Docs[0].Body, lineOffset, nil)
}

func fromYAML(y ast.Node, lineOffset int, key ast.Node) (*node, *syntaxError) {
	at := y
	if key != nil {
		at = key
	}
	n := &node{}
	if tok := at.GetToken(); tok != nil && tok.Position != nil {
		n.line, n.col = tok.Position.Line+lineOffset, tok.Position.Column
	}
	switch t := y.(type) {
	case *ast.MappingNode:
		n.kind = kindObject
		if key == nil && len(t.Values) > 0 {
			// Point at the first key, not at the mapping's ':' token.
			if tok := t.Values[0].Key.GetToken(); tok != nil && tok.Position != nil {
				n.line, n.col = tok.Position.Line+lineOffset, tok.Position.Column
			}
		}
		seen := map[string]bool{}
		for _, mv := range t.Values {
			k, err := yamlKey(mv.Key, lineOffset)
			if err != nil {
				return nil, err
			}
			if seen[k] {
				p := mv.Key.GetToken().Position
				return nil, &syntaxError{line: p.Line + lineOffset, col: p.Column, msg: fmt.Sprintf("duplicate key %q", k)}
			}
			seen[k] = true
			child, err := fromYAML(mv.Value, lineOffset, mv.Key)
			if err != nil {
				return nil, err
			}
			n.members = append(n.members, member{key: k, val: child})
		}
	case *ast.MappingValueNode:
		return fromYAML(&ast.MappingNode{BaseNode: t.BaseNode, Values: []*ast.MappingValueNode{t}}, lineOffset, key)
	case *ast.SequenceNode:
		n.kind = kindArray
		for _, v := range t.Values {
			child, err := fromYAML(v, lineOffset, nil)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, child)
		}
	case *ast.NullNode:
		n.kind = kindNull
	case *ast.BoolNode:
		n.kind, n.boolean = kindBool, t.Value
	case *ast.IntegerNode, *ast.FloatNode:
		n.kind, n.str = kindNumber, y.GetToken().Value
	case *ast.StringNode:
		n.kind, n.str = kindString, t.Value
	case *ast.LiteralNode:
		n.kind, n.str = kindString, t.Value.Value
	case *ast.InfinityNode, *ast.NanNode:
		n.kind, n.str = kindString, y.GetToken().Value
	case *ast.TagNode:
		return fromYAML(t.Value, lineOffset, key)
	case *ast.AnchorNode:
		return fromYAML(t.Value, lineOffset, key)
	default:
		return nil, &syntaxError{line: n.line, col: n.col, msg: fmt.Sprintf("unsupported YAML construct (%s); write plain values", y.Type())}
	}
	return n, nil
}

func yamlKey(k ast.MapKeyNode, lineOffset int) (string, *syntaxError) {
	if s, ok := k.(ast.ScalarNode); ok {
		return fmt.Sprint(s.GetValue()), nil
	}
	p := k.GetToken().Position
	return "", &syntaxError{line: p.Line + lineOffset, col: p.Column, msg: "a key must be a plain value"}
}

// describe renders a node's value for messages.
func describe(n *node) string {
	switch n.kind {
	case kindString:
		return strconv.Quote(n.str)
	case kindNumber:
		return n.str
	case kindBool:
		return strconv.FormatBool(n.boolean)
	case kindNull:
		return "null"
	}
	return n.kind.String()
}

// joinPath appends key to a dotted key path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
