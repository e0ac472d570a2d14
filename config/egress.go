package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// EgressRule is one entry of sandbox.egress: a destination the sandbox's
// egress proxy lets the agent reach (see package executor/egress).
type EgressRule struct {
	// Host is a lower-case DNS name, "*.domain" (names under domain, not
	// domain itself) or an IP address.
	Host string `json:"host"`
	// Port is the one port allowed; 0 allows 80 and 443.
	Port int `json:"port,omitempty"`
	// Private lets an exact name resolve to private, loopback or
	// link-local addresses (an internal registry).
	Private bool `json:"private,omitempty"`
	// Secret is a credential the proxy adds to requests to the host, only
	// inside TLS to a server it verified; plain HTTP to the host is
	// refused.
	Secret *EgressSecret `json:"secret,omitempty"`
}

// EgressSecret names a credential of the gateway, never its value.
type EgressSecret struct {
	// Env is the gateway's environment variable holding the secret.
	Env string `json:"env"`
	// Header is the request header set ("Authorization" when empty).
	Header string `json:"header,omitempty"`
	// Prefix goes before the secret, e.g. "Bearer ".
	Prefix string `json:"prefix,omitempty"`
}

// maxEgressRules bounds sandbox.egress.
const maxEgressRules = 256

var (
	egressKeys       = []string{"host", "private", "secret"}
	egressSecretKeys = []string{"env", "header", "prefix"}
	egressNameRE     = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	envNameRE        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE     = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// egressDoc is the sandbox.egress row of REFERENCE.md.
const egressDoc = "hosts the agent may reach through the gateway's egress proxy while the container keeps network \"none\": " +
	"`[\"registry.npmjs.org\", \"*.github.com\", \"git.internal:8443\", {\"host\": \"pkgs.internal\", \"private\": true, \"secret\": {\"env\": \"PKG_TOKEN\", \"prefix\": \"Bearer \"}}]`; " +
	"see Egress below"

// egress decodes sandbox.egress.
func (s *sandboxDecoder) egress(n *node, path string) {
	if n.kind != kindArray {
		s.wrongType(n, path, "an array of host names", `["registry.npmjs.org"]`)
		return
	}
	if len(n.items) > maxEgressRules {
		s.errorf(n, path, fmt.Sprintf("list at most %d; use wildcards such as \"*.example.com\"", maxEgressRules), "%d entries", len(n.items))
		return
	}
	rules := make([]EgressRule, 0, len(n.items))
	for i, it := range n.items {
		p := indexPath(path, i)
		var r EgressRule
		switch it.kind {
		case kindString:
			var ok bool
			if r, ok = s.egressHost(it, p, it.str); !ok {
				continue
			}
		case kindObject:
			if !s.object(it, p, egressKeys) {
				continue
			}
			hn := it.get("host")
			if hn == nil {
				s.errorf(it, joinPath(p, "host"), `add "host": "name" or "name:port"`, "missing")
				continue
			}
			h, ok := s.str(hn, joinPath(p, "host"), `"registry.example.com"`)
			if !ok {
				continue
			}
			if r, ok = s.egressHost(hn, joinPath(p, "host"), h); !ok {
				continue
			}
			if pn := it.get("private"); pn != nil {
				if r.Private, ok = s.boolean(pn, joinPath(p, "private")); !ok {
					continue
				}
				if r.Private && strings.HasPrefix(r.Host, "*.") {
					s.errorf(pn, joinPath(p, "private"), "list the internal host by its exact name", "private addresses can only be allowed for an exact host name, not a wildcard")
					continue
				}
			}
			if sn := it.get("secret"); sn != nil {
				if r.Secret, ok = s.egressSecret(sn, joinPath(p, "secret"), r); !ok {
					continue
				}
			}
		default:
			s.wrongType(it, p, `a host name or {"host": ...}`, `"registry.npmjs.org"`)
			continue
		}
		rules = append(rules, r)
	}
	s.sb.Egress = rules
}

// egressHost parses "host", "host:port", "*.domain[:port]", an IP or
// "[ipv6]:port".
func (s *sandboxDecoder) egressHost(n *node, path, v string) (EgressRule, bool) {
	if strings.Contains(v, "://") || strings.Contains(v, "/") {
		s.errorf(n, path, `write the host name alone, e.g. "registry.npmjs.org" or "git.example.com:8443"`, "%q is a URL, not a host", v)
		return EgressRule{}, false
	}
	host, port := v, 0
	if h, ps, err := net.SplitHostPort(v); err == nil {
		p, perr := strconv.Atoi(ps)
		if perr != nil || p < 1 || p > 65535 {
			s.errorf(n, path, `use a port from 1 to 65535, e.g. "git.example.com:8443"`, "%q has no valid port", v)
			return EgressRule{}, false
		}
		host, port = h, p
	} else if len(v) > 2 && v[0] == '[' && v[len(v)-1] == ']' {
		host = v[1 : len(v)-1]
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Zone() == "" {
		return EgressRule{Host: a.String(), Port: port}, true
	}
	switch {
	case host != strings.ToLower(host):
		s.errorf(n, path, fmt.Sprintf("write it in lower case: %q", strings.ToLower(v)), "%q is not lower case", v)
	case host == "*" || strings.Count(host, "*") > 1 || strings.Contains(host, "*") && !strings.HasPrefix(host, "*."):
		s.errorf(n, path, `a wildcard is only the whole first label, e.g. "*.example.com"`, "%q is not a host pattern", v)
	case !egressNameRE.MatchString(host) || len(host) > 253:
		s.errorf(n, path, "use a DNS name of letters, digits, '-' and dots (non-ASCII names in punycode), or an IP address", "%q is not a host name", v)
	case strings.HasPrefix(host, "*.") && !strings.Contains(host[2:], "."):
		s.errorf(n, path, `name a domain, e.g. "*.example.com"`, "%q allows a whole top-level domain", v)
	default:
		return EgressRule{Host: host, Port: port}, true
	}
	return EgressRule{}, false
}

// egressSecret decodes an entry's secret block.
func (s *sandboxDecoder) egressSecret(n *node, path string, r EgressRule) (*EgressSecret, bool) {
	if !s.object(n, path, egressSecretKeys) {
		return nil, false
	}
	sec := &EgressSecret{}
	ok := true
	for _, m := range n.members {
		p := joinPath(path, m.key)
		v, good := s.str(m.val, p, `"NAME"`)
		if !good {
			ok = false
			continue
		}
		switch m.key {
		case "env":
			if strings.HasPrefix(v, "$ENV.") {
				s.errorf(m.val, p, fmt.Sprintf("write the variable's name alone: %q", strings.TrimPrefix(v, "$ENV.")), "%q: env takes a variable name", v)
				ok = false
				continue
			}
			if !envNameRE.MatchString(v) {
				s.errorf(m.val, p, "name an environment variable of the gateway, e.g. \"NPM_TOKEN\" (never the secret itself)", "%q is not a variable name", v)
				ok = false
				continue
			}
			sec.Env = v
		case "header":
			if !headerNameRE.MatchString(v) {
				s.errorf(m.val, p, `use a header name, e.g. "Authorization"`, "%q is not a header name", v)
				ok = false
				continue
			}
			sec.Header = v
		case "prefix":
			sec.Prefix = v
		}
	}
	if !ok {
		return nil, false
	}
	if sec.Env == "" {
		s.errorf(n, joinPath(path, "env"), `add "env": "NAME", the gateway's environment variable holding the secret`, "missing")
		return nil, false
	}
	if _, set := s.opts.lookupEnv()(sec.Env); !set {
		s.warnf(n, joinPath(path, "env"), "set it in the gateway's environment; until then requests go without the credential", "$%s is not set", sec.Env)
	}
	if r.Port == 443 {
		s.warnf(n, path, "the proxy adds credentials only to requests it forwards itself: http://, and https:// from clients that send the URL to the proxy (busybox wget); curl, git, npm and pip tunnel https:// with CONNECT, which stays encrypted and carries none",
			"may have no effect on port 443")
	}
	return sec, true
}

// egressReference is the Egress section of REFERENCE.md.
const egressReference = `### Egress

` + "`sandbox.egress`" + ` lists where the agent may connect; the default, an empty list, is no network at all. With entries, the
container still runs with network "none": the agent gets ` + "`HTTP_PROXY`/`HTTPS_PROXY`" + ` (and lower-case forms) pointing at the
helper's loopback relay to the gateway's egress proxy, and ` + "`NO_PROXY`" + ` for loopback. The proxy resolves names on the gateway,
refuses names not listed, IP literals (unless the address itself is listed) and names resolving to private, loopback,
link-local (the cloud metadata address 169.254.169.254), multicast or reserved addresses, unless the entry names the host
exactly with ` + "`\"private\": true`" + `. It dials only the addresses it checked, so DNS rebinding gets nowhere. A refusal is a
403 whose body names the host and this key. Each connection is logged with user, chat, host, port, bytes up and down and
outcome; one request's egress is capped in bytes and connections (the gateway's settings).

Entries: ` + "`\"host\"`" + ` (ports 80 and 443), ` + "`\"host:port\"`" + ` (that port only), ` + "`\"*.example.com\"`" + ` (any name under
example.com, not example.com itself nor evil-example.com), an IP address, or an object ` + "`{\"host\": ..., \"private\": true, \"secret\": {...}}`" + `.

| secret key | type | default | meaning |
|---|---|---|---|
| ` + "`env`" + ` | string | (required) | the gateway's environment variable holding the secret (its name, never the value) |
| ` + "`header`" + ` | string | "Authorization" | the request header the proxy sets, replacing any the agent sent |
| ` + "`prefix`" + ` | string | "" | text before the secret, e.g. "Bearer " |

The proxy adds the secret only inside TLS to a server whose certificate it verified, never in clear: plain ` + "`http://`" + ` to
a host with a secret is refused with 403 (at any port, in any spelling of the name), since the agent could otherwise make
the gateway send the secret unencrypted. It adds it to ` + "`https://`" + ` from clients that send the URL to the proxy (busybox
wget; the proxy then speaks TLS upstream itself), and to ` + "`https://`" + ` from clients that tunnel with CONNECT (curl, git, npm, pip): for a host with a secret the proxy terminates
the tunnel with a certificate from the gateway's own CA (made at start-up, its key only in the gateway's memory), which
the sandbox trusts through ` + "`$HOME/.agentbox/egress-ca.pem`" + ` and ` + "`ca-bundle.pem`" + ` (the image's roots plus the CA) and
NODE_EXTRA_CA_CERTS, SSL_CERT_FILE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, REQUESTS_CA_BUNDLE and PIP_CERT; tunnels to hosts
without a secret stay opaque. The agent never sees the secret (an allowed host that echoes it back can leak it).

What it cannot stop: whatever the agent sends to an allowed host (an allowed git host or paste site can receive the
workspace), and any protocol spoken inside a tunnel to an allowed host:port. DNS tunnelling is impossible: the sandbox has
no resolver and no network; only names the agent asks the proxy for reach the gateway's resolver, after the allowlist.

Cursor assistants can list Cursor's hosts here instead of a network (for example ` + "`\"*.cursor.sh\"`" + `; check which hosts your
version of cursor-agent contacts, and that it honours HTTPS_PROXY).

`
