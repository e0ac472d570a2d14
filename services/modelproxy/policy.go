package modelproxy

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/tidwall/gjson"
)

// The endpoints the proxy forwards: POST only, these exact paths, no query
// but the "beta=true" the Anthropic SDK in Claude Code adds. Everything
// else (the Files, Batches, Models and admin APIs, other methods,
// dot-segments, encoded or doubled slashes) is refused before anything is
// read from the body, since the connector's key would open them for every
// tenant of the gateway.
const (
	PathMessages    = "/v1/messages"
	PathCountTokens = "/v1/messages/count_tokens"
	allowedQuery    = "beta=true"
)

// maxJSONDepth bounds the nesting of a request body. gjson validates
// recursively: a 30 MiB body of "[" nesting 15 million deep overflows the
// goroutine stack, a fatal error that takes the whole gateway down.
const maxJSONDepth = 512

// DefaultMaxOutputTokens caps a call's max_tokens when
// Options.MaxOutputTokens is 0; Claude Code 2.1.197 and 2.1.330 send 32000.
const DefaultMaxOutputTokens = 32000

// refusal is a request the proxy answers itself.
type refusal struct {
	status  int
	errType string
	msg     string // to the CLI, prefixed "agentbox: "
	reason  string // to the log
}

func (f *refusal) write(w http.ResponseWriter, api *apiSpec) {
	api.writeError(w, f.status, f.errType, "agentbox: "+f.msg)
}

// forbidden refuses a request target of api for reason.
func forbidden(api *apiSpec, reason string) *refusal {
	return &refusal{status: http.StatusForbidden, errType: "permission_error", reason: reason,
		msg: "the sandbox's model proxy forwards only POST " + strings.Join(api.paths, " and POST ") + "; " + reason}
}

func badRequest(format string, args ...any) *refusal {
	msg := fmt.Sprintf(format, args...)
	return &refusal{status: http.StatusBadRequest, errType: "invalid_request_error", msg: msg, reason: msg}
}

// endpoint checks the method and the raw request target byte for byte (so
// "/v1/messages/../files", "/v1/messages/%2e%2e/files", "//v1/messages",
// "/v1%2Fmessages" and absolute-form targets all fail) and returns the
// path and query to forward.
func (s *apiSpec) endpoint(r *http.Request) (path, query string, f *refusal) {
	path, query, _ = strings.Cut(r.RequestURI, "?")
	switch {
	case !s.hasPath(path):
		return "", "", forbidden(s, fmt.Sprintf("%s %s is not one of them", r.Method, clip(path)))
	case r.Method != http.MethodPost:
		return "", "", forbidden(s, fmt.Sprintf("method %s is not allowed", clip(r.Method)))
	case query != "" && (s.query == "" || query != s.query):
		return "", "", forbidden(s, fmt.Sprintf("query %q is not allowed", clip(query)))
	}
	return path, query, nil
}

// clip shortens what the agent sent for messages and logs.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Request headers forwarded upstream: what Claude Code 2.1.197 sends
// (testdata/cli-2.1.197-requests.txt; 2.1.330 sends the same names, with
// more anthropic-beta values) minus the key, the encoding and the
// connection headers. Anything else (X-Forwarded-*, Forwarded, Cookie,
// hop-by-hop headers, custom headers the agent adds) is dropped.
var (
	requestHeaders = []string{"Accept", "Anthropic-Beta", "Anthropic-Dangerous-Direct-Browser-Access",
		"Anthropic-Version", "Content-Type", "User-Agent", "X-App", "X-Claude-Code-Session-Id"}
	requestHeaderPrefixes = []string{"X-Stainless-"}
	// Response headers passed back to the agent: the body's type and the
	// ones the SDK's retry logic reads. Organisation ids, cookies and
	// hop-by-hop headers stay on the host.
	responseHeaders        = []string{"Content-Type", "Request-Id", "Retry-After", "Retry-After-Ms", "X-Should-Retry"}
	responseHeaderPrefixes = []string{"Anthropic-Ratelimit-"}
)

// copyAllowed copies the headers of src named in names or starting with
// one of prefixes (canonical forms) to dst.
func copyAllowed(dst, src http.Header, names, prefixes []string) {
	for k, vs := range src {
		ck := http.CanonicalHeaderKey(k)
		ok := slices.Contains(names, ck)
		for _, p := range prefixes {
			ok = ok || strings.HasPrefix(ck, p)
		}
		if ok {
			dst[ck] = append([]string(nil), vs...)
		}
	}
}

// bodyKeys are the top-level fields of a Messages API request the proxy
// forwards. mcp_servers (the upstream would connect to any URL the agent
// names) and container are refused with everything not listed.
var bodyKeys = []string{"context_management", "max_tokens", "messages", "metadata", "model", "output_config",
	"service_tier", "stop_sequences", "stream", "system", "temperature", "thinking", "tool_choice",
	"tools", "top_k", "top_p"}

// deniedToolTypes are server-side tool type prefixes that would let the
// upstream reach the network for the agent, which has none.
var deniedToolTypes = []string{"web_fetch", "mcp_toolset"}

// edit replaces body[start:end] with text (an insertion when start == end).
type edit struct {
	start, end int
	raw, text  string // raw is what body[start:end] must hold
}

// shaped is a request body after the policy: the pieces to send, in order.
type shaped struct {
	pieces [][]byte
	size   int64
	model  string
	stream bool
}

// shape checks a request body and pins its model and max_tokens without
// copying it: the result is the original bytes with the edited values
// spliced in. The body is read strictly first (strictjson: no name twice
// in any object, valid UTF-8, one object and nothing after it), so that
// the proxy and the upstream cannot read different values from one body:
// the model it pins, the server tools it refuses ({"type": "custom",
// "type": "web_fetch_..."} is one tool to a reader keeping the first name
// and another to one keeping the last).
func (p *Proxy) shape(path string, body []byte) (*shaped, *refusal) {
	if _, err := strictjson.Read(body, strictjson.Options{Names: p.api.bodyKeys, MaxDepth: maxJSONDepth}); err != nil {
		return nil, badRequest("the request body is not valid JSON: %v", err)
	}
	// The body is not changed while doc is in use; the string view avoids
	// copying up to MaxRequestBytes.
	doc := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !doc.IsObject() {
		return nil, badRequest("the request body is not a JSON object")
	}
	var model, maxTokens, stream gjson.Result
	var f *refusal
	members := 0
	doc.ForEach(func(k, v gjson.Result) bool {
		members++
		key := k.String()
		switch {
		case !slices.Contains(p.api.bodyKeys, key):
			f = badRequest("the request field %q is not allowed through the sandbox's model proxy", clip(key))
		case key == "tools" && v.IsArray():
			v.ForEach(func(_, tool gjson.Result) bool {
				if why := p.api.tool(tool); why != "" {
					f = badRequest("%s", why)
				}
				return f == nil
			})
		case p.api.field != nil && p.api.field(key, v) != "":
			f = badRequest("%s", p.api.field(key, v))
		case key == "model":
			model = v
		case key == p.api.maxOutputKey:
			maxTokens = v
		case key == "stream":
			stream = v
		}
		return f == nil
	})
	if f != nil {
		return nil, f
	}
	var edits []edit
	var inserts []string
	out := &shaped{model: model.String(), stream: stream.Bool()}
	switch want := p.opts.Model; {
	case model.Type == gjson.String && (model.Str == want || slices.Contains(p.opts.AllowedModels, model.Str)):
	case want == "" && len(p.opts.AllowedModels) > 0:
		return nil, badRequest("model %q is not allowed; this assistant may use %s", clip(model.String()), strings.Join(p.opts.AllowedModels, ", "))
	case want == "":
	case model.Exists():
		edits = append(edits, edit{start: model.Index, end: model.Index + len(model.Raw), raw: model.Raw, text: strconv.Quote(want)})
		out.model = want
	default:
		inserts = append(inserts, `"model":`+strconv.Quote(want))
		out.model = want
	}
	if limit := p.maxOutput(); path == p.api.capPath && limit > 0 {
		capped := strconv.FormatInt(limit, 10)
		switch {
		case maxTokens.Type == gjson.Number && maxTokens.Num <= float64(limit):
		case maxTokens.Exists():
			edits = append(edits, edit{start: maxTokens.Index, end: maxTokens.Index + len(maxTokens.Raw), raw: maxTokens.Raw, text: capped})
		default:
			inserts = append(inserts, strconv.Quote(p.api.maxOutputKey)+":"+capped)
		}
	}
	if len(inserts) > 0 {
		text := strings.Join(inserts, ",")
		if members > 0 {
			text += ","
		}
		at := bytes.IndexByte(body, '{') + 1 // the object's own brace: only whitespace precedes it
		edits = append(edits, edit{start: at, end: at, text: text})
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	at := 0
	for _, e := range edits {
		if e.start < at || e.end > len(body) || string(body[e.start:e.end]) != e.raw {
			return nil, badRequest("the request body could not be rewritten")
		}
		out.add(body[at:e.start])
		out.add([]byte(e.text))
		at = e.end
	}
	out.add(body[at:])
	return out, nil
}

func (s *shaped) add(b []byte) {
	if len(b) > 0 {
		s.pieces = append(s.pieces, b)
		s.size += int64(len(b))
	}
}

func (p *Proxy) maxOutput() int64 {
	switch {
	case p.opts.MaxOutputTokens < 0:
		return 0
	case p.opts.MaxOutputTokens == 0:
		return DefaultMaxOutputTokens
	}
	return p.opts.MaxOutputTokens
}
