package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Assistant is one assistants/<id>/ directory.
type Assistant struct {
	// ID is the directory name.
	ID string `json:"id"`
	// Dir is the assistant's directory (absolute).
	Dir string `json:"-"`
	// File is package.yao's path relative to the gateway directory.
	File        string `json:"file"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// ConnectorID names the connector; Connector is the resolved one.
	ConnectorID string     `json:"connector"`
	Connector   *Connector `json:"-"`
	// Sandbox is nil for a plain assistant (no sandbox block): its
	// requests go straight to the gateway's next handler.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// MCP lists the servers the agent may use (package.yao mcp.servers),
	// resolved against MCPServers.
	MCP []MCPUse `json:"mcp,omitempty"`
	// MCPServers are all definitions found in mcps/, by id.
	MCPServers map[string]*MCPServer `json:"-"`
	// Prompts are prompts.yml's messages, in order.
	Prompts []Prompt `json:"prompts,omitempty"`
	// Hooks is the path (absolute) of src/index.ts or src/index.js, or "".
	Hooks string `json:"-"`
	// Skills are the valid skills found in skills/; refused ones are left
	// out and explained in Problems.
	Skills []Skill `json:"skills,omitempty"`
	// Problems are this assistant's warnings and excluded skills.
	Problems []Problem `json:"problems,omitempty"`
}

// Prompt is one message of prompts.yml.
type Prompt struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	Name    string `json:"name,omitempty"`
}

// SystemPrompt joins the trimmed contents of the system prompts,
// separated by a blank line.
func (a *Assistant) SystemPrompt() string {
	var parts []string
	for _, p := range a.Prompts {
		if c := strings.TrimSpace(p.Content); p.Role == "system" && c != "" {
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "\n\n")
}

var assistantIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// loadAssistant reads assistants/<id>/. Errors go to ps; skill problems go
// to the assistant's own list and never fail loading.
func loadAssistant(root, id string, connectors map[string]*Connector, opts *LoadOptions, ps *problems) *Assistant {
	relDir := "assistants/" + id
	a := &Assistant{ID: id, Dir: filepath.Join(root, "assistants", id), File: relDir + "/package.yao"}
	local := &problems{}
	d := newDecoder(a.File, local)
	if !assistantIDRE.MatchString(id) {
		d.file = relDir
		d.errorf(nil, "", "rename the directory: letters, digits, _, . and -", "%q is not a valid assistant id", id)
	}
	a.MCPServers = loadMCPServers(root, relDir+"/mcps", opts, local)
	if n := readJSONC(d, filepath.Join(a.Dir, "package.yao")); n != nil && d.object(n, "", fieldKeys(packageFields)) {
		decodePackage(d, n, a, connectors, opts)
	}
	a.Prompts = loadPrompts(root, relDir+"/prompts.yml", local)
	a.Hooks = findHooks(a.Dir, relDir, local)

	skillProblems := &problems{}
	a.Skills = loadSkills(root, relDir+"/skills", skillProblems)

	for _, p := range local.list {
		ps.add(p)
		if p.Severity == SeverityWarning {
			a.Problems = append(a.Problems, p)
		}
	}
	a.Problems = append(a.Problems, skillProblems.list...)
	sortProblems(a.Problems)
	return a
}

func decodePackage(d *decoder, n *node, a *Assistant, connectors map[string]*Connector, opts *LoadOptions) {
	a.Name = a.ID
	if v := n.get("name"); v != nil {
		if s, ok := d.str(v, "name", `"Coder Assistant"`); ok && s != "" {
			a.Name = s
		}
	}
	if v := n.get("description"); v != nil {
		a.Description, _ = d.str(v, "description", `"writes code in a sandbox"`)
	}
	cn := n.get("connector")
	if cn == nil {
		d.errorf(n, "connector", `add "connector" naming a file in connectors/, e.g. "deepseek.v3" for connectors/deepseek/v3.conn.yao`, "missing")
	} else if id, ok := d.str(cn, "connector", `"deepseek.v3"`); ok {
		a.ConnectorID = id
		a.Connector = connectors[id]
		if a.Connector == nil {
			known := connectorIDs(connectors)
			hint := suggest(id, known)
			if hint == "" {
				hint = "create connectors/" + strings.ReplaceAll(id, ".", "/") + connSuffix
				if len(known) > 0 {
					hint += " or use one of " + quoteList(known)
				}
			}
			d.errorf(cn, "connector", hint, "unknown connector %q", id)
		}
	}
	if v := n.get("sandbox"); v != nil {
		a.Sandbox = decodeSandbox(d, v, opts)
	}
	if v := n.get("mcp"); v != nil {
		a.MCP = decodeMCP(d, v, a.MCPServers)
	}
	used := map[string]bool{}
	for _, u := range a.MCP {
		used[u.ServerID] = true
	}
	for id, s := range a.MCPServers {
		if !used[id] {
			d.ps.add(Problem{File: s.File, Message: "defined but not listed in mcp.servers; the agent cannot use it",
				Hint: `add {"server_id": "` + id + `"} to mcp.servers in package.yao, or delete the file`, Severity: SeverityWarning})
		}
	}
	checkCommandConnector(d, cn, a)
}

// checkCommandConnector applies the command's rules to the connector.
func checkCommandConnector(d *decoder, cn *node, a *Assistant) {
	if a.Sandbox == nil || a.Connector == nil {
		return
	}
	cmd := lookupCommand(a.Sandbox.Command)
	if cmd == nil {
		return
	}
	c := a.Connector
	if c.Type != "" && !contains(cmd.ConnectorTypes, c.Type) {
		d.errorf(cn, "connector", "use a connector of type "+quoteList(cmd.ConnectorTypes),
			"connector %q is of type %q, which %s cannot use", a.ConnectorID, c.Type, cmd.Name)
	}
	if cmd.NeedsKey != "" && c.Key == "" && c.KeyEnv == "" {
		d.errorf(cn, "connector", `add "key": "$ENV.CURSOR_API_KEY" to the options of `+c.File,
			"connector %q has no key: %s", a.ConnectorID, cmd.NeedsKey)
	}
}

var promptRoles = []string{"system", "user", "assistant"}

// loadPrompts reads prompts.yml: a YAML list of {role, content}.
func loadPrompts(root, rel string, ps *problems) []Prompt {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil // prompts.yml is optional
	}
	d := newDecoder(rel, ps)
	n, perr := parseYAML(src, 0)
	if perr != nil {
		d.syntax(perr, "malformed YAML")
		return nil
	}
	if n.kind == kindNull {
		return nil
	}
	if n.kind != kindArray {
		d.wrongType(n, "", "a list of messages", "- role: system (next line: content: ...)")
		return nil
	}
	var out []Prompt
	for i, it := range n.items {
		p := indexPath("", i)
		if !d.object(it, p, fieldKeys(promptFields)) {
			continue
		}
		var pr Prompt
		roleOK, contentOK := false, false
		if v := it.get("role"); v == nil {
			d.errorf(it, joinPath(p, "role"), "add role: system, user or assistant", "missing")
		} else {
			pr.Role, roleOK = d.oneOf(v, joinPath(p, "role"), promptRoles)
		}
		if v := it.get("content"); v == nil {
			d.errorf(it, joinPath(p, "content"), "add content: the message text", "missing")
		} else {
			pr.Content, contentOK = d.str(v, joinPath(p, "content"), `"You are a careful engineer."`)
		}
		if v := it.get("name"); v != nil {
			pr.Name, _ = d.str(v, joinPath(p, "name"), `"coder"`)
		}
		if roleOK && contentOK {
			out = append(out, pr)
		}
	}
	return out
}

// findHooks locates src/index.ts or src/index.js (never both).
func findHooks(dir, relDir string, ps *problems) string {
	var found []string
	for _, name := range []string{"index.ts", "index.js"} {
		p := filepath.Join(dir, "src", name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return ""
	case 1:
		return found[0]
	}
	ps.add(Problem{File: relDir + "/src", Message: "both index.ts and index.js exist",
		Hint: "keep one: index.ts is transpiled, index.js runs as is", Severity: SeverityError})
	return ""
}
