package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Connector types.
const (
	ConnectorAnthropic = "anthropic"
	ConnectorOpenAI    = "openai"
	// ConnectorCursor is Cursor's own service, the one cursor-agent talks to.
	ConnectorCursor = "cursor"
)

// connectorTypes lists the connector types in documentation order.
var connectorTypes = []string{ConnectorAnthropic, ConnectorOpenAI, ConnectorCursor}

// defaultHosts are the connector hosts used when a file names none.
var defaultHosts = map[string]string{
	ConnectorAnthropic: "https://api.anthropic.com",
	ConnectorOpenAI:    "https://api.openai.com/v1",
	ConnectorCursor:    "https://api.cursor.com",
}

// Secret is a credential. It prints as "[redacted]" (fmt, JSON) so that
// logging a Connector never leaks it; Reveal returns the value.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret for %#v.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// MarshalText redacts the secret.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// Connector is a model endpoint: connectors/<path>/<name>.conn.yao.
type Connector struct {
	// ID is the path below connectors/ without ".conn.yao", "/" replaced
	// by "." (connectors/deepseek/v3.conn.yao is "deepseek.v3").
	ID string `json:"id"`
	// File is the file's path relative to the gateway directory.
	File  string `json:"file"`
	Label string `json:"label,omitempty"`
	// Type is ConnectorAnthropic, ConnectorOpenAI or ConnectorCursor.
	Type string `json:"type"`
	// Host is the API base URL (defaulted per type).
	Host  string `json:"host"`
	Model string `json:"model"`
	// Key is the API key ("" when the file has none).
	Key Secret `json:"key,omitempty"`
	// KeyEnv is the environment variable the key came from, if any.
	KeyEnv string `json:"key_env,omitempty"`
	// OpenAI holds what differs between OpenAI-compatible providers
	// (ConnectorOpenAI only; the zero value otherwise).
	OpenAI OpenAIOptions `json:"openai,omitempty"`
}

// OpenAIOptions are an openai connector's provider settings, used when
// the Claude CLI's Anthropic calls are translated to Chat Completions.
type OpenAIOptions struct {
	// ReasoningField is "reasoning_content", "reasoning" or "" (both).
	ReasoningField string `json:"reasoning_field,omitempty"`
	// Thinking is "", "reasoning_effort" or "enable_thinking".
	Thinking string `json:"thinking,omitempty"`
	// StreamUsage sends stream_options.include_usage (default true).
	StreamUsage bool `json:"stream_usage"`
	// MaxTokens caps max_tokens (0: no cap).
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxCompletionTokens sends max_completion_tokens instead.
	MaxCompletionTokens bool `json:"max_completion_tokens,omitempty"`
	// API is the OpenAI API the provider serves to the codex runner:
	// OpenAIAPIChat (the default) or OpenAIAPIResponses.
	API string `json:"api,omitempty"`
}

// The APIs an openai connector may serve (OpenAIOptions.API).
const (
	// OpenAIAPIChat is Chat Completions ({host}/chat/completions).
	OpenAIAPIChat = "chat_completions"
	// OpenAIAPIResponses is the Responses API ({host}/responses), which the
	// Codex CLI speaks: its calls are then passed through.
	OpenAIAPIResponses = "responses"
)

const connSuffix = ".conn.yao"

var envRefRE = regexp.MustCompile(`^\$ENV\.([A-Za-z_][A-Za-z0-9_]*)$`)

// loadConnectors reads every connectors/**/*.conn.yao below root.
func loadConnectors(root string, opts *LoadOptions, ps *problems) map[string]*Connector {
	out := map[string]*Connector{}
	dir := filepath.Join(root, "connectors")
	if _, err := os.Stat(dir); err != nil {
		return out
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.HasSuffix(e.Name(), connSuffix) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		ps.add(Problem{File: "connectors", Message: "cannot read the directory: " + err.Error(), Hint: "check its permissions", Severity: SeverityError})
	}
	sort.Strings(files)
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		rel = filepath.ToSlash(rel)
		id := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(rel, "connectors/"), connSuffix), "/", ".")
		c := loadConnector(root, rel, id, opts, ps)
		if c == nil {
			continue
		}
		if prev, dup := out[id]; dup {
			ps.add(Problem{File: rel, Message: fmt.Sprintf("connector id %q is also defined by %s", id, prev.File),
				Hint: "rename one of the files; ids come from the path with \"/\" replaced by \".\"", Severity: SeverityError})
			continue
		}
		out[id] = c
	}
	return out
}

func loadConnector(root, rel, id string, opts *LoadOptions, ps *problems) *Connector {
	d := newDecoder(rel, ps)
	n := readJSONC(d, filepath.Join(root, filepath.FromSlash(rel)))
	if n == nil || !d.object(n, "", connectorKeys("")) {
		return nil
	}
	c := &Connector{ID: id, File: rel}
	if v := n.get("label"); v != nil {
		c.Label, _ = d.str(v, "label", `"DeepSeek V3"`)
	}
	types := connectorTypes
	if v := n.get("type"); v == nil {
		d.errorf(n, "type", "add \"type\": "+quoteList(types), "missing")
	} else {
		c.Type, _ = d.oneOf(v, "type", types)
	}
	o := n.get("options")
	if o == nil {
		d.errorf(n, "options", `add "options": {"model": "...", "key": "$ENV.NAME"}`, "missing")
		return c
	}
	if !d.object(o, "options", connectorKeys("options.")) {
		return c
	}
	if v := o.get("host"); v != nil {
		if h, ok := d.str(v, "options.host", `"https://api.anthropic.com"`); ok {
			if u, err := url.Parse(h); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				d.errorf(v, "options.host", `use an http or https URL, e.g. "https://api.anthropic.com"`, "%q is not a URL", h)
			} else {
				c.Host = strings.TrimRight(h, "/")
			}
		}
	} else {
		c.Host = defaultHosts[c.Type]
	}
	if v := o.get("model"); v == nil {
		d.errorf(o, "options.model", `add "model", e.g. "claude-sonnet-4-5"`, "missing")
	} else if m, ok := d.str(v, "options.model", `"claude-sonnet-4-5"`); ok {
		if m == "" {
			d.errorf(v, "options.model", "name the model", "empty")
		}
		c.Model = m
	}
	if v := o.get("key"); v != nil {
		if k, ok := d.str(v, "options.key", `"$ENV.ANTHROPIC_API_KEY"`); ok {
			c.Key, c.KeyEnv = resolveSecret(d, v, "options.key", k, opts)
		}
	}
	loadOpenAIOptions(d, o, c)
	return c
}

// loadOpenAIOptions reads the options only openai connectors have; on
// another type each of them is an error, since it would have no effect.
func loadOpenAIOptions(d *decoder, o *node, c *Connector) {
	c.OpenAI.StreamUsage = true
	if c.Type == ConnectorOpenAI {
		c.OpenAI.API = OpenAIAPIChat
	}
	for _, k := range []string{"api", "reasoning_field", "thinking", "stream_usage", "max_tokens", "max_completion_tokens"} {
		v := o.get(k)
		if v == nil {
			continue
		}
		p := "options." + k
		if c.Type != ConnectorOpenAI {
			d.errorf(v, p, "remove it, or make the connector \"type\": \"openai\"", "only openai connectors have %s", k)
			continue
		}
		switch k {
		case "api":
			c.OpenAI.API, _ = d.oneOf(v, p, []string{OpenAIAPIChat, OpenAIAPIResponses})
		case "reasoning_field":
			c.OpenAI.ReasoningField, _ = d.oneOf(v, p, []string{"reasoning_content", "reasoning"})
		case "thinking":
			c.OpenAI.Thinking, _ = d.oneOf(v, p, []string{"reasoning_effort", "enable_thinking"})
		case "stream_usage":
			c.OpenAI.StreamUsage, _ = d.boolean(v, p)
		case "max_tokens":
			if n, ok := d.integer(v, p, "8192"); ok {
				if n < 1 {
					d.errorf(v, p, "use a positive number of tokens, e.g. 8192", "%d is not positive", n)
				}
				c.OpenAI.MaxTokens = n
			}
		case "max_completion_tokens":
			c.OpenAI.MaxCompletionTokens, _ = d.boolean(v, p)
		}
	}
}

// resolveSecret expands "$ENV.NAME" through opts.LookupEnv; an unset or
// empty variable is an error naming it.
func resolveSecret(d *decoder, n *node, p, v string, opts *LoadOptions) (Secret, string) {
	if !strings.HasPrefix(v, "$ENV.") {
		return Secret(v), ""
	}
	m := envRefRE.FindStringSubmatch(v)
	if m == nil {
		d.errorf(n, p, `write "$ENV.NAME" with a variable name of letters, digits and _`, "%q is not a valid environment reference", v)
		return "", ""
	}
	val, ok := opts.lookupEnv()(m[1])
	switch {
	case !ok:
		d.errorf(n, p, "export "+m[1]+" in the gateway's environment, or write the value in the file", "environment variable %s is not set", m[1])
	case val == "":
		d.errorf(n, p, "give "+m[1]+" a value in the gateway's environment", "environment variable %s is empty", m[1])
	}
	return Secret(val), m[1]
}

// connectorIDs lists the known connector ids, sorted.
func connectorIDs(cs map[string]*Connector) []string {
	ids := make([]string, 0, len(cs))
	for id := range cs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// readJSONC reads and parses a JSONC file, reporting a missing file or a
// syntax error; it returns nil after a problem.
func readJSONC(d *decoder, file string) *node {
	src, err := os.ReadFile(file)
	if err != nil {
		d.errorf(nil, "", "check that the file exists and is readable", "cannot read: %s", pathErr(err))
		return nil
	}
	n, perr := parseJSONC(bytes.TrimPrefix(src, []byte("\xef\xbb\xbf")))
	if perr != nil {
		d.syntax(perr, "malformed JSONC")
		return nil
	}
	return n
}

// pathErr renders an fs error without the absolute path (the problem
// already names the file).
func pathErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// connectorKeys lists the keys of connectorFields under prefix ("" for
// the top level, where "options" stands for its members).
func connectorKeys(prefix string) []string {
	var keys []string
	for _, k := range fieldKeys(connectorFields) {
		switch {
		case prefix == "" && strings.HasPrefix(k, "options."):
			if !contains(keys, "options") {
				keys = append(keys, "options")
			}
		case prefix == "" || strings.HasPrefix(k, prefix):
			keys = append(keys, strings.TrimPrefix(k, prefix))
		}
	}
	return keys
}
