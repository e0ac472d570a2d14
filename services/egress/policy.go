package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrRefused is wrapped by every refusal of the policy (Policy.Check and
// the address checks); the proxy answers 403 with its message.
var ErrRefused = errors.New("egress: refused")

// ConfigKey is the configuration key that lists an assistant's allowed
// hosts; refusals name it so the reader knows what to change.
const ConfigKey = "sandbox.egress"

// DefaultPorts are the ports a rule without a port allows.
var DefaultPorts = []int{80, 443}

// Credential is a secret the proxy adds to the https:// requests it makes
// itself over TLS it verifies (absolute-form, and inside CONNECT tunnels
// it intercepts with Options.CA) for a rule's hosts; plain http:// to
// them is refused. The policy holds the name of an environment variable
// of the gateway, never the value: the value is read when a request needs
// it.
type Credential struct {
	// Env names the gateway's environment variable holding the secret.
	Env string
	// Header is the request header set to Prefix+secret ("Authorization"
	// when empty). A header of that name sent by the agent is replaced.
	Header string
	// Prefix goes before the secret, e.g. "Bearer ".
	Prefix string
}

// Rule allows one host name, wildcard or IP address.
type Rule struct {
	// Host is a lower-case DNS name ("registry.npmjs.org"), a wildcard
	// "*.example.com" (any name under example.com, not example.com itself)
	// or an IP address (which alone allows that address as a literal).
	Host string
	// Port is the one port allowed; 0 allows DefaultPorts.
	Port int
	// Private lets an exact host name resolve to private, loopback,
	// link-local or other non-public addresses (an internal registry).
	// Without it such addresses are refused, whatever the name: that is
	// what stops DNS rebinding. Wildcards cannot set it; an IP rule has it
	// implicitly.
	Private bool
	// Credential, when set, is added to the host's requests inside TLS
	// the proxy verified; plain HTTP to the host is refused.
	Credential *Credential
}

// String is the rule as it would be written in the configuration.
func (r Rule) String() string {
	h := r.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if r.Port != 0 {
		h += ":" + strconv.Itoa(r.Port)
	}
	return h
}

func (r Rule) wildcard() bool { return strings.HasPrefix(r.Host, "*.") }

func (r Rule) ip() (netip.Addr, bool) {
	a, err := netip.ParseAddr(r.Host)
	return a.Unmap(), err == nil
}

// matchesHost reports whether the normalised name (or IP literal) h is
// covered by r. A wildcard matches on a label boundary only, so
// "*.example.com" matches "a.example.com" and "a.b.example.com" but neither
// "example.com" nor "evil-example.com".
func (r Rule) matchesHost(h string) bool {
	if r.wildcard() {
		suffix := r.Host[1:] // ".example.com"
		return len(h) > len(suffix) && strings.HasSuffix(h, suffix)
	}
	if a, ok := r.ip(); ok {
		b, err := netip.ParseAddr(h)
		return err == nil && b.Unmap() == a
	}
	return h == r.Host
}

func (r Rule) matchesPort(p int) bool {
	if r.Port != 0 {
		return p == r.Port
	}
	for _, d := range DefaultPorts {
		if p == d {
			return true
		}
	}
	return false
}

// ParseRule parses "host", "host:port", "*.domain[:port]", "ip", "ip:port"
// or "[ipv6]:port" into a rule without credential.
func ParseRule(s string) (Rule, error) {
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n > 65535 {
			return Rule{}, fmt.Errorf("egress: %q: port %q is not a number from 1 to 65535", s, p)
		}
		host, port = h, n
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	r := Rule{Host: host, Port: port}
	return r, r.validate()
}

// validate checks r and normalises nothing: rules are written lower case.
func (r Rule) validate() error {
	h := r.Host
	if r.Port < 0 || r.Port > 65535 {
		return fmt.Errorf("egress: rule %q: port %d is not from 1 to 65535", r, r.Port)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("egress: rule %q: an address with a zone cannot be allowed; list the address without %%%s", r, a.Zone())
		}
		return nil
	}
	name := strings.TrimPrefix(h, "*.")
	if strings.Contains(name, "*") {
		return fmt.Errorf("egress: rule %q: a wildcard is only allowed as the whole first label, e.g. \"*.example.com\"", r)
	}
	if n, ok := normalName(name); !ok || n != name {
		return fmt.Errorf("egress: rule %q: %q is not a lower-case DNS name (letters, digits, '-' and dots; non-ASCII names in punycode)", r, name)
	}
	if r.wildcard() && !strings.Contains(name, ".") {
		return fmt.Errorf("egress: rule %q: a wildcard over a top-level domain allows too much; name a domain such as \"*.example.com\"", r)
	}
	if r.wildcard() && r.Private {
		return fmt.Errorf("egress: rule %q: private addresses can only be allowed for an exact host name, not a wildcard", r)
	}
	if c := r.Credential; c != nil {
		if c.Env == "" {
			return fmt.Errorf("egress: rule %q: the credential names no environment variable; set its env", r)
		}
		if c.Header != "" && !validHeaderName(c.Header) {
			return fmt.Errorf("egress: rule %q: %q is not a header name", r, c.Header)
		}
	}
	return nil
}

func validHeaderName(s string) bool {
	for _, c := range []byte(s) {
		if !isLDH(c) && (c < 'A' || c > 'Z') && c != '_' {
			return false
		}
	}
	return s != ""
}

// isLDH reports whether c is a lower-case letter, a digit or '-'.
func isLDH(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' }

// normalName lower-cases a DNS name and drops one trailing dot; ok is false
// when it is not a name of LDH labels (IDNs must come in punycode).
func normalName(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" || len(s) > 253 {
		return "", false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for _, c := range []byte(l) {
			if !isLDH(c) {
				return "", false
			}
		}
	}
	return s, true
}

// Policy is an allowlist of destinations. The zero Policy refuses
// everything. It is immutable once made and safe for concurrent use.
type Policy struct {
	rules []Rule
}

// NewPolicy validates the rules and returns a policy over them.
func NewPolicy(rules ...Rule) (*Policy, error) {
	var errs []error
	for _, r := range rules {
		if err := r.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Policy{rules: append([]Rule(nil), rules...)}, nil
}

// Rules returns a copy of the policy's rules.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	return append([]Rule(nil), p.rules...)
}

// Intercepts reports whether a rule carries a Credential: with a CA, the
// proxy then terminates TLS for that host, so the sandbox must trust the
// CA (CAEnv, CAInstallScript).
func (p *Policy) Intercepts() bool {
	if p == nil {
		return false
	}
	for _, r := range p.rules {
		if r.Credential != nil {
			return true
		}
	}
	return false
}

// Check decides whether host:port may be reached and returns the rule that
// allows it: the first exact rule, else the first wildcard. host is what
// the agent asked for (a name or an IP literal). Refusals wrap ErrRefused
// and say which key to change.
func (p *Policy) Check(host string, port int) (Rule, error) {
	if port < 1 || port > 65535 {
		return Rule{}, fmt.Errorf("%w: port %d is not a port; the proxy reaches host:port pairs listed in %s", ErrRefused, port, ConfigKey)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if p != nil {
			for _, r := range p.rules {
				if r.matchesHost(host) && r.matchesPort(port) {
					return r, nil
				}
			}
		}
		return Rule{}, fmt.Errorf("%w: %s is an IP address; the sandbox reaches hosts by name only (add the host name, or the address itself, to %s)", ErrRefused, net.JoinHostPort(a.String(), strconv.Itoa(port)), ConfigKey)
	}
	name, ok := normalName(host)
	if !ok {
		return Rule{}, fmt.Errorf("%w: %q is not a DNS host name (non-ASCII names go in punycode); the proxy reaches only names listed in %s", ErrRefused, host, ConfigKey)
	}
	var wild *Rule
	var portsOf []string
	if p != nil {
		for i, r := range p.rules {
			if !r.matchesHost(name) {
				continue
			}
			if !r.matchesPort(port) {
				portsOf = append(portsOf, r.String())
				continue
			}
			if !r.wildcard() {
				return r, nil
			}
			if wild == nil {
				wild = &p.rules[i]
			}
		}
	}
	if wild != nil {
		return *wild, nil
	}
	hp := net.JoinHostPort(name, strconv.Itoa(port))
	if len(portsOf) > 0 {
		return Rule{}, fmt.Errorf("%w: %s: port %d is not allowed for this host (allowed by %s: %s); add %q to %s", ErrRefused, hp, port, ConfigKey, strings.Join(portsOf, ", "), hp, ConfigKey)
	}
	return Rule{}, fmt.Errorf("%w: %s is not on the sandbox's egress allowlist; add %q to %s in the assistant's package.yao", ErrRefused, hp, name, ConfigKey)
}

// special are the address ranges that are not public unicast destinations
// beyond what netip's predicates cover.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: embeds any IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local NAT64
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, ...)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4: embeds any IPv4
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),        // discard
}

// Public reports whether a is a public unicast address: not private,
// loopback, link-local (the cloud metadata address 169.254.169.254 among
// them), multicast, unspecified, reserved or an IPv6 form embedding an
// arbitrary IPv4 address.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() ||
		a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range special {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// checkAddrs keeps the resolved addresses r may reach: all of them for an IP
// rule or a Private name, the public ones otherwise. It fails when none is
// left, naming what the name resolved to.
func checkAddrs(r Rule, host string, addrs []netip.Addr) ([]netip.Addr, error) {
	_, ipRule := r.ip()
	var ok []netip.Addr
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if a.Zone() != "" {
			refused = append(refused, a.String())
			continue
		}
		if ipRule || r.Private || Public(a) {
			ok = append(ok, a)
		} else {
			refused = append(refused, a.String())
		}
	}
	if len(ok) == 0 {
		if len(refused) == 0 {
			return nil, refusedFor(ReasonUnresolvable, "%s has no address", host)
		}
		return nil, refusedFor(ReasonPrivateAddress, "%s resolves to %s, a private, loopback, link-local or reserved address; "+
			"only a host listed by its exact name with \"private\": true in %s may reach one", host, strings.Join(refused, ", "), ConfigKey)
	}
	return ok, nil
}
