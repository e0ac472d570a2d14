package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// MCP transports.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
	// TransportGateway is a server whose tools the gateway registers in Go
	// (executor/mcphost, middleware Options.Tools); the agent reaches it
	// through the in-container helper's relay, so it has no command or url.
	TransportGateway = "gateway"
)

// MCPServer is an MCP server definition: assistants/<id>/mcps/<server_id>.mcp.yao,
// JSONC with "transport" "stdio" (command, args, env), "http" (url,
// headers) or "gateway" (tools the gateway serves itself). Env and header
// values may be "$ENV.NAME".
type MCPServer struct {
	// ID is the file name without ".mcp.yao".
	ID string `json:"id"`
	// File is the definition's path relative to the gateway directory.
	File        string `json:"file,omitempty"`
	Label       string `json:"label,omitempty"`
	Description string `json:"description,omitempty"`
	// Transport is TransportStdio, TransportHTTP or TransportGateway.
	Transport string            `json:"transport"`
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	URL       string            `json:"url,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// MCPUse is one entry of package.yao's mcp.servers: a server the agent
// may use and its tool allowlist.
type MCPUse struct {
	ServerID string `json:"server_id"`
	// Tools is the allowlist; empty means every tool of the server.
	Tools []string `json:"tools,omitempty"`
	// Server is the resolved definition from mcps/.
	Server *MCPServer `json:"-"`
}

const mcpSuffix = ".mcp.yao"

var (
	serverIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// validServerID: letters, digits, _ and -, without "__" (the separator of
// mcp__<server>__<tool>).
func validServerID(id string) bool {
	return serverIDRE.MatchString(id) && !strings.Contains(id, "__") && len(id) <= 64
}

// loadMCPServers reads assistants/<id>/mcps/*.mcp.yao.
func loadMCPServers(root, relDir string, opts *LoadOptions, ps *problems) map[string]*MCPServer {
	out := map[string]*MCPServer{}
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(relDir)))
	if err != nil {
		return out // no mcps/ directory: no servers
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), mcpSuffix) {
			continue
		}
		rel := relDir + "/" + e.Name()
		id := strings.TrimSuffix(e.Name(), mcpSuffix)
		d := newDecoder(rel, ps)
		if !validServerID(id) {
			d.errorf(nil, "", "rename the file: letters, digits, _ and - (no \"__\"), e.g. mcps/filesystem.mcp.yao", "%q is not a valid MCP server id", id)
			continue
		}
		if s := decodeMCPServer(d, root, rel, id, opts); s != nil {
			out[id] = s
		}
	}
	return out
}

func decodeMCPServer(d *decoder, root, rel, id string, opts *LoadOptions) *MCPServer {
	n := readJSONC(d, filepath.Join(root, filepath.FromSlash(rel)))
	if n == nil || !d.object(n, "", fieldKeys(mcpServerFields)) {
		return nil
	}
	s := &MCPServer{ID: id, File: rel}
	if v := n.get("label"); v != nil {
		s.Label, _ = d.str(v, "label", `"Filesystem"`)
	}
	if v := n.get("description"); v != nil {
		s.Description, _ = d.str(v, "description", `"read and write files"`)
	}
	tn := n.get("transport")
	if tn == nil {
		d.errorf(n, "transport", `add "transport": "stdio" (command, args, env), "http" (url) or "gateway" (the gateway's own tools)`, "missing")
		return nil
	}
	var ok bool
	if s.Transport, ok = d.oneOf(tn, "transport", []string{TransportStdio, TransportHTTP, TransportGateway}); !ok {
		return nil
	}
	only := map[string]string{"command": TransportStdio, "args": TransportStdio, "env": TransportStdio, "url": TransportHTTP, "headers": TransportHTTP}
	for _, m := range n.members {
		if t, ok := only[m.key]; ok && t != s.Transport {
			d.errorf(m.val, m.key, "remove it, or use \"transport\": \""+t+"\"", "not used by transport %q", s.Transport)
		}
	}
	switch s.Transport {
	case TransportStdio:
		if v := n.get("command"); v == nil {
			d.errorf(n, "command", `add "command", e.g. "npx"`, "missing for transport \"stdio\"")
		} else if c, ok := d.str(v, "command", `"npx"`); ok {
			if c == "" {
				d.errorf(v, "command", "name the program to run", "empty")
			}
			s.Command = c
		}
		if v := n.get("args"); v != nil {
			s.Args, _ = d.strings(v, "args", `["-y", "@modelcontextprotocol/server-filesystem"]`)
		}
		if v := n.get("env"); v != nil {
			s.Env = secretMap(d, v, "env", opts)
		}
	case TransportHTTP:
		if v := n.get("url"); v == nil {
			d.errorf(n, "url", `add "url", e.g. "https://mcp.example.com/mcp"`, "missing for transport \"http\"")
		} else if u, ok := d.str(v, "url", `"https://mcp.example.com/mcp"`); ok {
			if !isHTTPURL(u) {
				d.errorf(v, "url", `use an http or https URL, e.g. "https://mcp.example.com/mcp"`, "%q is not a URL", u)
			}
			s.URL = u
		}
		if v := n.get("headers"); v != nil {
			s.Headers = secretMap(d, v, "headers", opts)
		}
	}
	return s
}

// secretMap reads an object of strings whose values may be "$ENV.NAME".
func secretMap(d *decoder, n *node, p string, opts *LoadOptions) map[string]string {
	m, ok := d.stringMap(n, p)
	if !ok {
		return nil
	}
	for _, mem := range n.members {
		v, _ := resolveSecret(d, mem.val, joinPath(p, mem.key), m[mem.key], opts)
		m[mem.key] = v.Reveal()
	}
	return m
}

// decodeMCP decodes package.yao's "mcp" block against the assistant's
// server definitions.
func decodeMCP(d *decoder, n *node, servers map[string]*MCPServer) []MCPUse {
	if !d.object(n, "mcp", []string{"servers"}) {
		return nil
	}
	sn := n.get("servers")
	if sn == nil {
		return nil
	}
	if sn.kind != kindArray {
		d.wrongType(sn, "mcp.servers", "an array", `[{"server_id": "filesystem", "tools": ["read_file"]}]`)
		return nil
	}
	known := make([]string, 0, len(servers))
	for id := range servers {
		known = append(known, id)
	}
	sort.Strings(known)
	var uses []MCPUse
	seen := map[string]bool{}
	for i, it := range sn.items {
		p := indexPath("mcp.servers", i)
		if !d.object(it, p, []string{"server_id", "tools"}) {
			continue
		}
		u := MCPUse{}
		idn := it.get("server_id")
		if idn == nil {
			d.errorf(it, joinPath(p, "server_id"), "add \"server_id\" naming a file in mcps/", "missing")
			continue
		}
		id, ok := d.str(idn, joinPath(p, "server_id"), `"filesystem"`)
		if !ok {
			continue
		}
		u.ServerID, u.Server = id, servers[id]
		switch {
		case seen[id]:
			d.errorf(idn, joinPath(p, "server_id"), "list each server once", "server %q is listed twice", id)
			continue
		case !validServerID(id):
			d.errorf(idn, joinPath(p, "server_id"), "use the name of a file in mcps/: letters, digits, _ and - (no \"__\"), e.g. \"filesystem\"", "%q is not a valid MCP server id", id)
			continue
		case u.Server == nil:
			hint := suggest(id, known)
			if hint == "" {
				hint = "create mcps/" + id + mcpSuffix
				if len(known) > 0 {
					hint += " or use one of " + quoteList(known)
				}
			}
			d.errorf(idn, joinPath(p, "server_id"), hint, "no MCP server %q in mcps/", id)
			continue
		}
		seen[id] = true
		if tn := it.get("tools"); tn != nil {
			tools, _ := d.strings(tn, joinPath(p, "tools"), `["read_file"]`)
			for j, t := range tools {
				if tn.kind == kindArray && tn.items[j].kind == kindString && !toolNameRE.MatchString(t) {
					d.errorf(tn.items[j], indexPath(joinPath(p, "tools"), j), "use the tool's name as the server lists it, e.g. \"read_file\"", "%q is not a tool name", t)
				}
			}
			u.Tools = tools
		}
		uses = append(uses, u)
	}
	return uses
}

// MCPTransform rewrites a server definition before it is written to the
// MCP configuration, e.g. to point it at the in-container helper relay.
type MCPTransform func(MCPServer) MCPServer

// HelperRelay points a server at the in-container helper, which relays
// it to the host: {"command": "agentbox-helper", "args": ["mcp",
// "--server", id]}, with no env (secrets stay on the host).
func HelperRelay(s MCPServer) MCPServer {
	return MCPServer{ID: s.ID, Transport: TransportStdio, Command: "agentbox-helper", Args: []string{"mcp", "--server", s.ID}}
}

// mcpJSONServer is one entry of Claude Code's .mcp.json.
type mcpJSONServer struct {
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// MCPConfig returns the .mcp.json content for the assistant's servers in
// Claude Code's format ({"mcpServers": {...}}), or nil when it uses none.
// transform, when not nil, rewrites each server first (see HelperRelay);
// without it, env and headers hold resolved secrets: never write that
// into a sandbox.
func (a *Assistant) MCPConfig(transform MCPTransform) ([]byte, error) {
	if len(a.MCP) == 0 {
		return nil, nil
	}
	servers := map[string]mcpJSONServer{}
	for _, u := range a.MCP {
		s := *u.Server
		switch {
		case s.Transport == TransportGateway:
			s = HelperRelay(s) // only the helper reaches the gateway's tools
		case transform != nil:
			s = transform(s)
		}
		switch s.Transport {
		case TransportHTTP:
			servers[u.ServerID] = mcpJSONServer{Type: "http", URL: s.URL, Headers: s.Headers}
		default:
			servers[u.ServerID] = mcpJSONServer{Command: s.Command, Args: s.Args, Env: s.Env}
		}
	}
	return json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
}

// MCPAllowedTools names the MCP tools the agent may call, in Claude
// Code's form: mcp__<server>__<tool> for each allowlisted tool, or
// mcp__<server> (every tool) when a server has no allowlist.
func (a *Assistant) MCPAllowedTools() []string {
	var out []string
	for _, u := range a.MCP {
		if len(u.Tools) == 0 {
			out = append(out, "mcp__"+u.ServerID)
			continue
		}
		for _, t := range u.Tools {
			out = append(out, "mcp__"+u.ServerID+"__"+t)
		}
	}
	return out
}

func isHTTPURL(s string) bool {
	return (strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")) && len(s) > len("https://") && !strings.ContainsAny(s, " \t\n")
}
