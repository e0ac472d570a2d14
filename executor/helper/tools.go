package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/textdist"
)

// ToolsCommand is the short name of the agent-facing tools CLI in images
// (a link to agentbox-helper; `agentbox-helper tools` is the same).
const ToolsCommand = "abx"

// ToolsOptions configure RunTools.
type ToolsOptions struct {
	// Dir holds mcp.sock and the token file (ContainerDir when empty).
	Dir string
	// Token overrides the token file (AGENTBOX_TOKEN, then Dir/token).
	Token string
	// Now is the clock (time.Now when nil); Location the time zone shown
	// beside UTC (time.Local when nil).
	Now      func() time.Time
	Location *time.Location
}

// toolsUsage is printed for -h and for a wrong command line.
const toolsUsage = `Usage: abx <command> [arguments]

Calls the gateway's tools granted to this request (the same tools the
agent sees as mcp__<server>__<tool>).

Commands:
  abx list                          list the tools, one block per tool
  abx describe <tool>               show a tool's description and input schema
  abx call <tool> ['<json object>'] call a tool; arguments as one JSON object,
  abx call <tool> key=value ...     or as key=value pairs (values parsed as JSON when they are)
  abx context                       show who this request runs for

<tool> is mcp__<server>__<tool>, <server>/<tool>, or the bare tool name when
only one server has it.
`

// RunTools is the agent-facing tools CLI (`abx`). Its output is written for
// an LLM reader: labelled line-oriented fields, every time with its zone
// and in UTC, results echoed back with what was called, hints where the
// caller probably erred, errors that say how to fix them, and a total at
// the end of every list. It returns the exit status: 0 on success, 1 when
// the call or the tool failed, 2 for a wrong command line.
func RunTools(ctx context.Context, args []string, stdout, stderr io.Writer, o ToolsOptions) int {
	if o.Dir == "" {
		o.Dir = ContainerDir
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	fail := func(code int, format string, a ...any) int {
		_, _ = fmt.Fprintf(stderr, "Error: "+format+"\n", a...)
		return code
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		_, _ = io.WriteString(w, toolsUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest := args[0], args[1:]
	switch {
	case cmd == "list" && len(rest) == 0, cmd == "context" && len(rest) == 0:
	case cmd == "describe" && len(rest) == 1, cmd == "call" && len(rest) >= 1:
	case cmd == "list" || cmd == "context" || cmd == "describe" || cmd == "call":
		return fail(2, "wrong arguments for %q; usage:\n%s", cmd, toolsUsage)
	default:
		msg := fmt.Sprintf("unknown command %q; use list, describe, call or context (abx -h shows usage)", cmd)
		if near := closest(cmd, []string{"list", "describe", "call", "context"}); near != "" {
			msg += "\n  Hint: did you mean abx " + near + "?"
		}
		return fail(2, "%s", msg)
	}
	var callArgs map[string]any
	var rawArgs map[string]string
	if cmd == "call" {
		var err error
		if callArgs, rawArgs, err = parseCallArgs(rest[1:]); err != nil {
			return fail(2, "%v", err)
		}
	}
	cs, err := dialTools(ctx, o)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer func() { _ = cs.Close() }()
	p := func(format string, a ...any) { _, _ = fmt.Fprintf(stdout, format, a...) }
	if cmd == "context" {
		return printContext(cs, p, o)
	}
	tools, err := listTools(ctx, cs)
	if err != nil {
		return fail(1, "listing the tools: %v; the request may have ended (tools work only during it)", err)
	}
	if cmd == "list" {
		for _, t := range tools {
			printTool(p, t, false)
		}
		if len(tools) == 0 {
			p("No tools are available to this request.\n  Hint: an assistant's mcp.servers in package.yao decides which gateway tools its sandbox sees\n")
		}
		p("Total: %d tool(s)\n", len(tools))
		return 0
	}
	t, err := findTool(tools, rest[0])
	hint := ""
	if err != nil {
		name, ok := qualifiedName(rest[0])
		if cmd != "call" || !ok {
			return fail(1, "%v", err)
		}
		// Not listed but named in full: abx does not judge what is granted;
		// the gateway does, and refuses and logs the call.
		t = &mcp.Tool{Name: name}
		hint = fmt.Sprintf("the %d tool(s) this request may call: %s (abx list shows them)", len(tools), toolNames(tools))
		if near := nearest(rest[0], tools); near != "" {
			hint = "did you mean " + near + "? " + hint
		}
	}
	if cmd == "describe" {
		printTool(p, t, true)
		return 0
	}
	stringArgs(t.InputSchema, callArgs, rawArgs)
	return callTool(ctx, cs, t, callArgs, p, stderr, o, hint)
}

// qualifiedName turns a tool named with its server (mcp__<server>__<tool>,
// <server>/<tool> or <server>__<tool>) into Claude Code's form.
func qualifiedName(want string) (string, bool) {
	if server, tool, ok := strings.Cut(want, "/"); ok && server != "" && tool != "" {
		return "mcp__" + server + "__" + tool, true
	}
	server, tool := splitToolName(want)
	if server == "" || tool == "" {
		return "", false
	}
	return "mcp__" + server + "__" + tool, true
}

// toolNames joins the tools' names, or says there are none.
func toolNames(tools []*mcp.Tool) string {
	if len(tools) == 0 {
		return "none"
	}
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

// dialTools connects to the host as the agent CLI (server id "") and
// initializes an MCP client session.
func dialTools(ctx context.Context, o ToolsOptions) (*mcp.ClientSession, error) {
	conn, lr, err := DialMCP(ctx, MCPRelayOptions{Dir: o.Dir, Token: o.Token})
	if err != nil {
		if errors.Is(err, ErrMCPRefused) {
			return nil, fmt.Errorf("the gateway refused the connection: %v", strings.TrimPrefix(err.Error(), ErrMCPRefused.Error()+": "))
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errors.New("this sandbox has no gateway tools now: no request token in " + SocketPath(o.Dir, TokenFile) +
				"; tools exist only while a request runs, for assistants granted some (mcp.servers in package.yao)")
		}
		return nil, fmt.Errorf("cannot reach the gateway's tools: %w; abx works only inside an agentbox sandbox during a request", err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: ToolsCommand, Version: fmt.Sprint(ProtocolVersion)}, nil)
	cs, err := c.Connect(ctx, NewLineTransport(lr, conn), nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("starting the MCP session: %w", err)
	}
	return cs, nil
}

// listTools lists every tool, following pagination, sorted by name.
func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	params := &mcp.ListToolsParams{}
	for {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		out = append(out, res.Tools...)
		if res.NextCursor == "" {
			break
		}
		params.Cursor = res.NextCursor
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// splitToolName splits mcp__<server>__<tool>.
func splitToolName(name string) (server, tool string) {
	rest, _ := strings.CutPrefix(name, "mcp__")
	server, tool, ok := strings.Cut(rest, "__")
	if !ok {
		return "", rest
	}
	return server, tool
}

// findTool resolves what the agent typed: the full name, server/tool, or
// a bare tool name that only one server has.
func findTool(tools []*mcp.Tool, want string) (*mcp.Tool, error) {
	var bare []*mcp.Tool
	for _, t := range tools {
		server, tool := splitToolName(t.Name)
		if t.Name == want || server+"/"+tool == want || server+"__"+tool == want {
			return t, nil
		}
		if tool == want {
			bare = append(bare, t)
		}
	}
	if len(bare) == 1 {
		return bare[0], nil
	}
	switch {
	case len(bare) > 1:
		var cands []string
		for _, t := range bare {
			cands = append(cands, t.Name)
		}
		return nil, fmt.Errorf("%q is ambiguous: %s; name the server, e.g. abx call %s", want, strings.Join(cands, ", "), cands[0])
	case len(tools) == 0:
		return nil, fmt.Errorf("no tool %q: this request has no tools (abx list shows them)", want)
	}
	msg := fmt.Sprintf("no tool %q; the %d available: %s", want, len(tools), toolNames(tools))
	if near := nearest(want, tools); near != "" {
		msg += fmt.Sprintf("\n  Hint: did you mean %s?", near)
	}
	return nil, errors.New(msg)
}

// nearest is the name closest to want by edit distance, when close enough
// to be a typo (fewer edits than a third of its length, plus one).
func nearest(want string, tools []*mcp.Tool) string {
	best, bestD := "", len(want)/3+1
	for _, t := range tools {
		server, tool := splitToolName(t.Name)
		for _, cand := range []string{t.Name, server + "/" + tool, tool} {
			if d := textdist.Levenshtein(want, cand); d < bestD {
				best, bestD = t.Name, d
			}
		}
	}
	return best
}

// closest is the candidate nearest to want by edit distance, when close
// enough.
func closest(want string, cands []string) string {
	best, bestD := "", len(want)/3+1
	for _, c := range cands {
		if d := textdist.Levenshtein(want, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// inputSchema is the part of a tool's input schema abx reads.
type inputSchema struct {
	Properties map[string]struct {
		Type        any    `json:"type"`
		Description string `json:"description"`
	} `json:"properties"`
	Required []string `json:"required"`
}

// parseSchema reads a tool's input schema (a map from the SDK); an
// unreadable one has no properties.
func parseSchema(schema any) inputSchema {
	var s inputSchema
	b, _ := json.Marshal(schema)
	_ = json.Unmarshal(b, &s)
	return s
}

// schemaArgs summarises an input schema's properties: "name (type,
// required)", sorted.
func schemaArgs(schema any) []string {
	s := parseSchema(schema)
	var out []string
	for name, p := range s.Properties {
		kind := fmt.Sprint(p.Type)
		if p.Type == nil {
			kind = "any"
		}
		if slices.Contains(s.Required, name) {
			kind += ", required"
		}
		line := fmt.Sprintf("%s (%s)", name, kind)
		if p.Description != "" {
			line += ": " + p.Description
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

// unknownArgs lists the argument names the schema does not declare,
// sorted, and the names it does; nil when it declares none (then anything
// goes).
func unknownArgs(schema any, args map[string]any) (unknown, known []string) {
	s := parseSchema(schema)
	if len(s.Properties) == 0 {
		return nil, nil
	}
	for k := range args {
		if _, ok := s.Properties[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	for k := range s.Properties {
		known = append(known, k)
	}
	sort.Strings(unknown)
	sort.Strings(known)
	return unknown, known
}

// printTool prints one tool block; full adds the schema and an example.
func printTool(p func(string, ...any), t *mcp.Tool, full bool) {
	server, tool := splitToolName(t.Name)
	p("Tool %s\n  Server: %s\n  Name: %s\n  Call: abx call %s/%s\n", t.Name, server, tool, server, tool)
	p("  Description: %s\n", oneLine(t.Description))
	args := schemaArgs(t.InputSchema)
	if len(args) == 0 {
		p("  Arguments: none\n")
	}
	for _, a := range args {
		p("  Argument: %s\n", a)
	}
	if full {
		b, _ := json.Marshal(t.InputSchema)
		p("  Input schema: %s\n", b)
	}
}

// oneLine joins a multi-line text into one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(none)"
	}
	return s
}

// parseCallArgs reads the call's arguments: nothing, one JSON object, or
// key=value pairs (a value that parses as JSON is taken as JSON, else as a
// string; raw keeps each pair's text for stringArgs).
func parseCallArgs(args []string) (out map[string]any, raw map[string]string, err error) {
	out = map[string]any{}
	if len(args) == 1 && strings.HasPrefix(strings.TrimSpace(args[0]), "{") {
		if err := json.Unmarshal([]byte(args[0]), &out); err != nil {
			return nil, nil, fmt.Errorf("the arguments are not a JSON object: %w; quote them for the shell, e.g. abx call srv/tool '{\"key\": \"value\"}'", err)
		}
		return out, nil, nil
	}
	raw = map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("argument %q is neither key=value nor a JSON object; write key=value (e.g. text=hello) or one '{...}' object", a)
		}
		raw[k] = v
		var jv any
		if err := json.Unmarshal([]byte(v), &jv); err == nil {
			out[k] = jv
		} else {
			out[k] = v
		}
	}
	return out, raw, nil
}

// stringArgs keeps a key=value pair's text as a string where the tool's
// schema declares a string property (order=43 means "43" there).
func stringArgs(schema any, args map[string]any, raw map[string]string) {
	if len(raw) == 0 {
		return
	}
	s := parseSchema(schema)
	for k, v := range raw {
		if p, ok := s.Properties[k]; ok && p.Type == "string" {
			args[k] = v
		}
	}
}

// fmtTime shows t in loc and in UTC.
func fmtTime(t time.Time, loc *time.Location) (local, utc string) {
	l := t.In(loc)
	return fmt.Sprintf("%s (%s)", l.Format("Mon 2006-01-02 15:04:05"), zoneName(l)), t.UTC().Format(time.RFC3339)
}

// zoneName is the location's name, or its abbreviation when it is Local.
func zoneName(t time.Time) string {
	if n := t.Location().String(); n != "Local" {
		return n
	}
	abbr, _ := t.Zone()
	return abbr
}

// callTool calls t and prints what was called, when, and what came back.
// A non-empty hint follows an error.
func callTool(ctx context.Context, cs *mcp.ClientSession, t *mcp.Tool, args map[string]any, p func(string, ...any), stderr io.Writer, o ToolsOptions, hint string) int {
	start := o.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.Name, Arguments: args})
	took := o.Now().Sub(start)
	argJSON, _ := json.Marshal(args)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			err = errors.New(rpcErr.Message) // without the SDK's "calling "tools/call"" prefix
		}
		_, _ = fmt.Fprintf(stderr, "Error: calling %s with %s: %v\n", t.Name, argJSON, err)
		if hint != "" {
			_, _ = fmt.Fprintf(stderr, "  Hint: %s\n", hint)
		}
		return 1
	}
	server, tool := splitToolName(t.Name)
	local, utc := fmtTime(start, o.Location)
	status := "ok"
	if res.IsError {
		status = "error"
	}
	p("Called %s\n  Server: %s\n  Tool: %s\n  Arguments: %s\n  Time: %s\n  UTC: %s\n  Duration: %s\n  Status: %s\n",
		t.Name, server, tool, argJSON, local, utc, took.Round(time.Millisecond), status)
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		} else {
			b, _ := json.Marshal(c)
			text = append(text, string(b))
		}
	}
	lines := strings.Split(strings.TrimRight(strings.Join(text, "\n"), "\n"), "\n")
	if len(text) == 0 {
		lines = nil
	}
	p("  Result lines: %d\n", len(lines))
	for _, l := range lines {
		p("  | %s\n", l)
	}
	if unknown, known := unknownArgs(t.InputSchema, args); len(unknown) > 0 {
		verb := "are not arguments"
		if len(unknown) == 1 {
			verb = "is not an argument"
		}
		p("  Hint: %s %s of %s/%s, which takes %s; check the spelling (abx describe %s/%s)\n",
			strings.Join(unknown, ", "), verb, server, tool, strings.Join(known, ", "), server, tool)
	}
	if res.IsError {
		if len(args) == 0 && len(schemaArgs(t.InputSchema)) > 0 {
			p("  Hint: no arguments were sent; abx describe %s/%s shows what the tool takes\n", server, tool)
		}
		return 1
	}
	return 0
}

// requestContext is the JSON the host puts in the agent connection's
// instructions (mcphost.Context).
type requestContext struct {
	User        string    `json:"user"`
	Chat        string    `json:"chat"`
	Assistant   string    `json:"assistant"`
	Sandbox     string    `json:"sandbox"`
	Opened      time.Time `json:"opened"`
	CallTimeout string    `json:"call_timeout"`
	Servers     []string  `json:"servers"`
}

// printContext prints the request's identity as the host reported it.
func printContext(cs *mcp.ClientSession, p func(string, ...any), o ToolsOptions) int {
	var rc requestContext
	if ir := cs.InitializeResult(); ir == nil || json.Unmarshal([]byte(ir.Instructions), &rc) != nil {
		p("Request context: unavailable (the gateway sent none)\n")
		return 1
	}
	opened, openedUTC := fmtTime(rc.Opened, o.Location)
	now, nowUTC := fmtTime(o.Now(), o.Location)
	p("Request context\n  User: %s\n  Chat: %s\n  Assistant: %s\n  Sandbox: %s\n  Started: %s\n  Started UTC: %s\n  Now: %s\n  Now UTC: %s\n  Call timeout: %s\n",
		rc.User, rc.Chat, rc.Assistant, rc.Sandbox, opened, openedUTC, now, nowUTC, rc.CallTimeout)
	for _, s := range rc.Servers {
		p("  Server: %s\n", s)
	}
	p("Total: %d server(s)\n", len(rc.Servers))
	return 0
}
