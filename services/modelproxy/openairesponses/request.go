package openairesponses

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// request is a Responses API request as both translations read it: the
// conversation as turns, the tools flattened to functions, and what maps
// the upstream's tool calls back to the Responses items the CLI expects.
type request struct {
	model     string
	stream    bool
	maxOutput int64
	// system are the instructions and the developer and system messages,
	// in order.
	system []jstr
	turns  []turn
	tools  []function
	// choice is "auto", "none", "required" or a function's upstream name.
	choice      string
	parallel    bool
	effort      string // reasoning.effort ("" when absent)
	temperature *float64
	topP        *float64
	// names maps an upstream tool name to the call it stands for.
	names map[string]callKind
}

// turn is one message of the conversation: a user or assistant message
// with text, images, tool calls or tool results.
type turn struct {
	role  string // "user" or "assistant"
	parts []part
}

// part is one piece of a turn.
type part struct {
	kind string // "text", "image", "call", "result"
	text jstr
	// image is an image's URL (a data: URL for inline data).
	image string
	// call and result pair by id; call's name is the upstream name and
	// args its JSON arguments.
	id, name, args string
}

// function is a tool as the upstream sees it: a function with a JSON
// schema.
type function struct {
	name        string
	description jstr
	parameters  jsontext.Value
}

// callKind is what an upstream tool call stands for in the Responses API.
type callKind struct {
	item      string // "function_call", "custom_tool_call" or "tool_search_call"
	name      string // the name the CLI knows
	namespace string // a namespaced function's namespace
}

// nameSep joins a namespace and a member into one upstream function name
// (mcp__gateway and whoami are mcp__gateway__whoami, Claude Code's form).
const nameSep = "__"

// customParameters is the schema of a custom (freeform) tool as a
// function: its whole input in one string.
const customParameters = `{"type":"object","properties":{"input":{"type":"string","description":"The tool's whole input, as free text in the format the tool's description gives."}},"required":["input"],"additionalProperties":false}`

// decodeRequest reads a Responses API request body. The body is read in
// one pass into specs (readBody), then translated in the order the
// Responses API gives its fields meaning: tools, tool_choice, input.
func decodeRequest(raw []byte) (*request, error) {
	b, err := readBody(raw)
	if err != nil {
		return nil, fmt.Errorf("the request body is not valid JSON")
	}
	r := &request{model: asString(b.model), stream: asBool(b.stream), maxOutput: asInt(b.maxOutput),
		parallel: b.parallel == nil || asBool(b.parallel),
		effort:   asString(b.effort), names: map[string]callKind{}, choice: "auto"}
	if isNumber(b.temperature) {
		f := asFloat(b.temperature)
		r.temperature = &f
	}
	if isNumber(b.topP) {
		f := asFloat(b.topP)
		r.topP = &f
	}
	if s := text(b.instructions); !emptyText(s) {
		r.system = append(r.system, s)
	}
	for _, t := range b.tools {
		r.addTool(t, "")
	}
	if err := r.decodeChoice(b.choice); err != nil {
		return nil, err
	}
	if b.inputText != nil {
		r.add("user", part{kind: "text", text: text(b.inputText)})
		return r, nil
	}
	for i, it := range b.input {
		if err := r.item(it); err != nil {
			return nil, fmt.Errorf("input item %d: %w", i, err)
		}
	}
	return r, nil
}

// addTool adds a tool of the request (or of a tool search's output) as the
// functions the upstream sees: a function as it is, a custom tool as a
// function of one string, a namespace's members under namespace__member,
// the client's tool_search as a function. Hosted tools (which the model
// proxy refuses before the translation) have no function.
func (r *request) addTool(t toolSpec, namespace string) {
	name, desc := asString(t.name), text(t.description)
	switch asName(t.typ) {
	case "function":
		up := name
		if namespace != "" {
			up = namespace + nameSep + name
		}
		r.function(up, desc, t.parameters, callKind{item: "function_call", name: name, namespace: namespace})
	case "custom":
		if def := text(t.definition); !emptyText(def) {
			desc = joinText([]jstr{desc, quote("\n\nThe input follows this " + asString(t.syntax) + " grammar:\n"), def}, "")
		}
		r.function(name, desc, jsontext.Value(customParameters), callKind{item: "custom_tool_call", name: name})
	case "namespace":
		for _, m := range t.tools {
			r.addTool(m, name)
		}
	case "tool_search":
		if asName(t.execution) == "client" {
			r.function("tool_search", desc, t.parameters, callKind{item: "tool_search_call", name: "tool_search"})
		}
	}
}

// function adds one upstream function, once.
func (r *request) function(name string, desc jstr, params jsontext.Value, k callKind) {
	if _, ok := r.names[name]; ok {
		return
	}
	if len(params) == 0 {
		params = jsontext.Value(`{"type":"object","properties":{}}`)
	}
	r.names[name] = k
	r.tools = append(r.tools, function{name: name, description: desc, parameters: params})
}

// decodeChoice reads tool_choice.
func (r *request) decodeChoice(c jsontext.Value) error {
	switch {
	case c == nil || c.Kind() == 'n':
	case c.Kind() == '"':
		switch s := asString(c); s {
		case "auto", "none", "required":
			r.choice = s
		default:
			return fmt.Errorf("tool_choice %q is not auto, none or required", s)
		}
	case member(c, "type") == "function" || member(c, "type") == "custom":
		r.choice = member(c, "name")
	default:
		r.choice = "auto" // a hosted tool or an allowed_tools list: the model chooses
	}
	return nil
}

// item adds one input item to the conversation.
func (r *request) item(it itemSpec) error {
	typ := asName(it.typ)
	if typ == "" && it.role != nil {
		typ = "message"
	}
	id := asString(it.callID)
	switch typ {
	case "message":
		return r.message(it)
	case "function_call":
		name := asString(it.name)
		if ns := asString(it.namespace); ns != "" {
			name = ns + nameSep + name
			if _, ok := r.names[name]; !ok {
				r.names[name] = callKind{item: "function_call", name: asString(it.name), namespace: ns}
			}
		}
		r.add("assistant", part{kind: "call", id: id, name: name, args: orEmptyObject(asString(it.arguments))})
	case "custom_tool_call":
		args, _ := json.Marshal(map[string]string{"input": asString(it.input)})
		r.add("assistant", part{kind: "call", id: id, name: asString(it.name), args: string(args)})
	case "tool_search_call":
		r.add("assistant", part{kind: "call", id: id, name: "tool_search", args: orEmptyObject(string(it.arguments))})
	case "function_call_output", "custom_tool_call_output":
		r.add("user", part{kind: "result", id: id, text: outputText(it)})
	case "tool_search_output":
		// The tools it found join the upstream's tool list, and the
		// model reads their names in the result.
		var names []string
		for _, t := range it.tools {
			r.addTool(t, "")
			names = append(names, foundNames(t, "")...)
		}
		r.add("user", part{kind: "result", id: id, text: quote("Tools found: " + strings.Join(names, ", "))})
	case "reasoning":
		// Another model's reasoning (encrypted for OpenAI) is no input the
		// upstream takes; the answers around it carry the conversation.
	default:
		// local_shell_call, web_search_call and other items the runner's
		// configuration never produces.
		return fmt.Errorf("items of type %q have no translation", typ)
	}
	return nil
}

// foundNames lists the upstream names of a found tool.
func foundNames(t toolSpec, namespace string) []string {
	switch asName(t.typ) {
	case "namespace":
		var out []string
		for _, m := range t.tools {
			out = append(out, foundNames(m, asString(t.name))...)
		}
		return out
	case "function", "custom":
		if namespace != "" {
			return []string{namespace + nameSep + asString(t.name)}
		}
		return []string{asString(t.name)}
	}
	return nil
}

// message adds a message item: developer and system ones are
// instructions.
func (r *request) message(it itemSpec) error {
	role := asName(it.role)
	var parts []part
	if it.contentText != nil {
		parts = []part{{kind: "text", text: text(it.contentText)}}
	}
	for _, p := range it.content {
		switch asName(p.typ) {
		case "input_text", "output_text", "text", "summary_text":
			parts = append(parts, part{kind: "text", text: text(p.text)})
		case "refusal":
			parts = append(parts, part{kind: "text", text: text(p.refusal)})
		case "input_image":
			if u := asString(p.imageURL); u != "" {
				parts = append(parts, part{kind: "image", image: u})
			} else {
				parts = append(parts, part{kind: "text", text: quote("[an image given by file id, which this model cannot read]")})
			}
		case "input_file":
			parts = append(parts, part{kind: "text", text: quote("[a file (" + asString(p.filename) + ") this model cannot read]")})
		}
	}
	switch role {
	case "developer", "system":
		var texts []jstr
		for _, p := range parts {
			if p.kind == "text" {
				texts = append(texts, p.text)
			}
		}
		if s := joinText(texts, "\n\n"); !emptyText(s) {
			r.system = append(r.system, s)
		}
	case "user", "assistant":
		for _, p := range parts {
			r.add(role, p)
		}
	default:
		return fmt.Errorf("message role %q is not developer, system, user or assistant", role)
	}
	return nil
}

// add appends p to the last turn when it is role's, else to a new turn.
func (r *request) add(role string, p part) {
	if n := len(r.turns); n > 0 && r.turns[n-1].role == role {
		r.turns[n-1].parts = append(r.turns[n-1].parts, p)
		return
	}
	r.turns = append(r.turns, turn{role: role, parts: []part{p}})
}

// outputText flattens a call's output: a string, or content parts of
// which text is kept and images are named.
func outputText(it itemSpec) jstr {
	if it.outputText != nil {
		return text(it.outputText)
	}
	out := make([]jstr, 0, len(it.output))
	for _, p := range it.output {
		switch typ := asName(p.typ); typ {
		case "input_text", "output_text", "text":
			out = append(out, text(p.text))
		default:
			out = append(out, quote("["+typ+"]"))
		}
	}
	return joinText(out, "\n")
}

// orEmptyObject is s, or {} when it is empty.
func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// systemText returns the instructions as one text.
func (r *request) systemText() jstr { return joinText(r.system, "\n\n") }
