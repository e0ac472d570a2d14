package openairesponses

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
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
	system []string
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
	text string
	// image is an image's URL (a data: URL for inline data).
	image string
	// call and result pair by id; call's name is the upstream name and
	// args its JSON arguments.
	id, name, args string
}

// function is a tool as the upstream sees it: a function with a JSON
// schema.
type function struct {
	name, description string
	parameters        json.RawMessage
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

// decodeRequest reads a Responses API request body.
func decodeRequest(raw []byte) (*request, error) {
	if !gjson.ValidBytes(raw) {
		return nil, fmt.Errorf("the request body is not valid JSON")
	}
	doc := members(gjson.ParseBytes(raw))
	r := &request{model: doc["model"].String(), stream: doc["stream"].Bool(), maxOutput: doc["max_output_tokens"].Int(),
		parallel: !doc["parallel_tool_calls"].Exists() || doc["parallel_tool_calls"].Bool(),
		effort:   doc["reasoning"].Get("effort").String(), names: map[string]callKind{}, choice: "auto"}
	if v := doc["temperature"]; v.Type == gjson.Number {
		f := v.Float()
		r.temperature = &f
	}
	if v := doc["top_p"]; v.Type == gjson.Number {
		f := v.Float()
		r.topP = &f
	}
	if s := doc["instructions"].String(); s != "" {
		r.system = append(r.system, s)
	}
	for _, t := range doc["tools"].Array() {
		r.addTool(t, "")
	}
	if err := r.decodeChoice(doc["tool_choice"]); err != nil {
		return nil, err
	}
	input := doc["input"]
	if input.Type == gjson.String {
		r.add("user", part{kind: "text", text: input.String()})
		return r, nil
	}
	for i, it := range input.Array() {
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
func (r *request) addTool(t gjson.Result, namespace string) {
	name, desc := t.Get("name").String(), t.Get("description").String()
	switch t.Get("type").String() {
	case "function":
		up := name
		if namespace != "" {
			up = namespace + nameSep + name
		}
		r.function(up, desc, json.RawMessage(t.Get("parameters").Raw), callKind{item: "function_call", name: name, namespace: namespace})
	case "custom":
		if def := t.Get("format.definition").String(); def != "" {
			desc += "\n\nThe input follows this " + t.Get("format.syntax").String() + " grammar:\n" + def
		}
		r.function(name, desc, json.RawMessage(customParameters), callKind{item: "custom_tool_call", name: name})
	case "namespace":
		for _, m := range t.Get("tools").Array() {
			r.addTool(m, name)
		}
	case "tool_search":
		if t.Get("execution").String() == "client" {
			r.function("tool_search", desc, json.RawMessage(t.Get("parameters").Raw), callKind{item: "tool_search_call", name: "tool_search"})
		}
	}
}

// function adds one upstream function, once.
func (r *request) function(name, desc string, params json.RawMessage, k callKind) {
	if _, ok := r.names[name]; ok {
		return
	}
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	r.names[name] = k
	r.tools = append(r.tools, function{name: name, description: desc, parameters: params})
}

// decodeChoice reads tool_choice.
func (r *request) decodeChoice(c gjson.Result) error {
	switch {
	case !c.Exists() || c.Type == gjson.Null:
	case c.Type == gjson.String:
		switch s := c.String(); s {
		case "auto", "none", "required":
			r.choice = s
		default:
			return fmt.Errorf("tool_choice %q is not auto, none or required", s)
		}
	case c.Get("type").String() == "function" || c.Get("type").String() == "custom":
		r.choice = c.Get("name").String()
	default:
		r.choice = "auto" // a hosted tool or an allowed_tools list: the model chooses
	}
	return nil
}

// members indexes an object's members by key in one pass, the first of a
// repeated key winning as with gjson.Get: each Get scans the object again,
// skipping its large values (instructions, command outputs) once per key
// (BenchmarkDecodeRequest).
func members(o gjson.Result) map[string]gjson.Result {
	m := make(map[string]gjson.Result, 8)
	o.ForEach(func(k, v gjson.Result) bool {
		if _, ok := m[k.String()]; !ok {
			m[k.String()] = v
		}
		return true
	})
	return m
}

// item adds one input item to the conversation.
func (r *request) item(obj gjson.Result) error {
	it := members(obj)
	typ := it["type"].String()
	if typ == "" && it["role"].Exists() {
		typ = "message"
	}
	id := it["call_id"].String()
	switch typ {
	case "message":
		return r.message(obj)
	case "function_call":
		name := it["name"].String()
		if ns := it["namespace"].String(); ns != "" {
			name = ns + nameSep + name
			if _, ok := r.names[name]; !ok {
				r.names[name] = callKind{item: "function_call", name: it["name"].String(), namespace: ns}
			}
		}
		r.add("assistant", part{kind: "call", id: id, name: name, args: orEmptyObject(it["arguments"].String())})
	case "custom_tool_call":
		args, _ := json.Marshal(map[string]string{"input": it["input"].String()})
		r.add("assistant", part{kind: "call", id: id, name: it["name"].String(), args: string(args)})
	case "tool_search_call":
		r.add("assistant", part{kind: "call", id: id, name: "tool_search", args: orEmptyObject(it["arguments"].Raw)})
	case "function_call_output", "custom_tool_call_output":
		r.add("user", part{kind: "result", id: id, text: outputText(it["output"])})
	case "tool_search_output":
		// The tools it found join the upstream's tool list, and the
		// model reads their names in the result.
		var names []string
		for _, t := range it["tools"].Array() {
			r.addTool(t, "")
			names = append(names, foundNames(t, "")...)
		}
		r.add("user", part{kind: "result", id: id, text: "Tools found: " + strings.Join(names, ", ")})
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
func foundNames(t gjson.Result, namespace string) []string {
	switch t.Get("type").String() {
	case "namespace":
		var out []string
		for _, m := range t.Get("tools").Array() {
			out = append(out, foundNames(m, t.Get("name").String())...)
		}
		return out
	case "function", "custom":
		if namespace != "" {
			return []string{namespace + nameSep + t.Get("name").String()}
		}
		return []string{t.Get("name").String()}
	}
	return nil
}

// message adds a message item: developer and system ones are
// instructions.
func (r *request) message(it gjson.Result) error {
	role := it.Get("role").String()
	c := it.Get("content")
	var parts []part
	if c.Type == gjson.String {
		parts = []part{{kind: "text", text: c.String()}}
	}
	for _, p := range c.Array() {
		switch p.Get("type").String() {
		case "input_text", "output_text", "text", "summary_text":
			parts = append(parts, part{kind: "text", text: p.Get("text").String()})
		case "refusal":
			parts = append(parts, part{kind: "text", text: p.Get("refusal").String()})
		case "input_image":
			if u := p.Get("image_url").String(); u != "" {
				parts = append(parts, part{kind: "image", image: u})
			} else {
				parts = append(parts, part{kind: "text", text: "[an image given by file id, which this model cannot read]"})
			}
		case "input_file":
			parts = append(parts, part{kind: "text", text: "[a file (" + p.Get("filename").String() + ") this model cannot read]"})
		}
	}
	switch role {
	case "developer", "system":
		var texts []string
		for _, p := range parts {
			if p.kind == "text" {
				texts = append(texts, p.text)
			}
		}
		if s := strings.Join(texts, "\n\n"); s != "" {
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
func outputText(o gjson.Result) string {
	if o.Type == gjson.String {
		return o.String()
	}
	var out []string
	for _, p := range o.Array() {
		switch p.Get("type").String() {
		case "input_text", "output_text", "text":
			out = append(out, p.Get("text").String())
		default:
			out = append(out, "["+p.Get("type").String()+"]")
		}
	}
	return strings.Join(out, "\n")
}

// orEmptyObject is s, or {} when it is empty.
func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// system returns the instructions as one text.
func (r *request) systemText() string { return strings.Join(r.system, "\n\n") }
