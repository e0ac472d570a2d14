package egress

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustRules(t *testing.T, specs ...string) *Policy {
	t.Helper()
	var rules []Rule
	for _, s := range specs {
		r, err := ParseRule(s)
		require.NoError(t, err, s)
		rules = append(rules, r)
	}
	p, err := NewPolicy(rules...)
	require.NoError(t, err)
	return p
}

func TestPolicyCheck(t *testing.T) {
	p := mustRules(t, "registry.npmjs.org", "*.github.com", "git.example.com:8443", "10.1.2.3:9000", "[2001:db8::1]:443", "exact.example.org")
	tests := map[string]struct {
		host     string
		port     int
		wantRule string // "" means refused
	}{
		"exact default 443":         {"registry.npmjs.org", 443, "registry.npmjs.org"},
		"exact default 80":          {"registry.npmjs.org", 80, "registry.npmjs.org"},
		"exact other port":          {"registry.npmjs.org", 8080, ""},
		"case and trailing dot":     {"Registry.NPMJS.org.", 443, "registry.npmjs.org"},
		"wildcard one label":        {"api.github.com", 443, "*.github.com"},
		"wildcard two labels":       {"a.b.github.com", 443, "*.github.com"},
		"wildcard not apex":         {"github.com", 443, ""},
		"wildcard label boundary":   {"evil-github.com", 443, ""},
		"wildcard suffix attack":    {"api.github.com.evil.test", 443, ""},
		"wildcard glued":            {"xgithub.com", 443, ""},
		"exact not a prefix match":  {"registry.npmjs.org.evil.test", 443, ""},
		"exact not subdomain":       {"a.exact.example.org", 443, ""},
		"explicit port":             {"git.example.com", 8443, "git.example.com:8443"},
		"explicit port only":        {"git.example.com", 443, ""},
		"ip literal listed":         {"10.1.2.3", 9000, "10.1.2.3:9000"},
		"ip literal other port":     {"10.1.2.3", 9001, ""},
		"ip literal not listed":     {"127.0.0.1", 443, ""},
		"metadata literal":          {"169.254.169.254", 80, ""},
		"ipv6 literal listed":       {"2001:db8::1", 443, "[2001:db8::1]:443"},
		"ipv4-mapped of listed":     {"::ffff:10.1.2.3", 9000, "10.1.2.3:9000"},
		"ipv6 loopback":             {"::1", 443, ""},
		"decimal ip is not a name":  {"2130706433", 80, ""},
		"not a name":                {"a b", 443, ""},
		"underscore":                {"a_b.github.com", 443, ""},
		"unicode":                   {"gïthub.com", 443, ""},
		"empty":                     {"", 443, ""},
		"localhost":                 {"localhost", 80, ""},
		"port zero":                 {"registry.npmjs.org", 0, ""},
		"percent-encoded host":      {"registry%2enpmjs.org", 443, ""},
		"wildcard literal asterisk": {"*.github.com", 443, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := p.Check(tc.host, tc.port)
			if tc.wantRule == "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrRefused)
				assert.Contains(t, err.Error(), ConfigKey, "a refusal names the key to change")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantRule, r.String())
		})
	}
}

func TestPolicyZeroRefusesEverything(t *testing.T) {
	var p *Policy
	for _, h := range []string{"example.com", "127.0.0.1", "localhost"} {
		_, err := p.Check(h, 443)
		assert.ErrorIs(t, err, ErrRefused, h)
	}
	empty, err := NewPolicy()
	require.NoError(t, err)
	_, err = empty.Check("example.com", 443)
	assert.ErrorIs(t, err, ErrRefused)
}

func TestPolicyExactBeatsWildcard(t *testing.T) {
	cred := &Credential{Env: "TOKEN"}
	p, err := NewPolicy(Rule{Host: "*.example.com"}, Rule{Host: "api.example.com", Credential: cred})
	require.NoError(t, err)
	r, err := p.Check("api.example.com", 443)
	require.NoError(t, err)
	assert.Same(t, cred, r.Credential)
}

func TestParseRuleErrors(t *testing.T) {
	tests := map[string]string{
		"port out of range": "example.com:70000",
		"port zero":         "example.com:0",
		"port word":         "example.com:http",
		"inner wildcard":    "a.*.example.com",
		"bare wildcard":     "*",
		"tld wildcard":      "*.com",
		"upper case":        "Example.com",
		"unicode":           "exämple.com",
		"scheme":            "https://example.com",
		"path":              "example.com/x",
		"empty":             "",
		"zone":              "[fe80::1%eth0]:80",
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRule(s)
			assert.Error(t, err)
		})
	}
	_, err := NewPolicy(Rule{Host: "*.example.com", Private: true})
	assert.ErrorContains(t, err, "exact host name")
	_, err = NewPolicy(Rule{Host: "example.com", Credential: &Credential{}})
	assert.ErrorContains(t, err, "environment variable")
	for _, h := range []string{"Bad Header", "X-A\r\nX-B", "X\x10", "X:Y", ""} {
		_, err = NewPolicy(Rule{Host: "example.com", Credential: &Credential{Env: "X", Header: h}})
		if h == "" {
			assert.NoError(t, err, "empty is the default, Authorization")
			continue
		}
		assert.ErrorContains(t, err, "header name", "%q", h)
	}
	_, err = NewPolicy(Rule{Host: "example.com", Credential: &Credential{Env: "X", Header: "X-Api_Key9"}})
	assert.NoError(t, err)
}

func TestPublic(t *testing.T) {
	tests := map[string]bool{
		"93.184.216.34":       true,
		"2606:4700::1111":     true,
		"127.0.0.1":           false,
		"127.8.9.10":          false,
		"10.0.0.1":            false,
		"172.16.5.4":          false,
		"192.168.1.1":         false,
		"169.254.169.254":     false,
		"100.64.0.1":          false,
		"0.0.0.0":             false,
		"0.1.2.3":             false,
		"224.0.0.1":           false,
		"255.255.255.255":     false,
		"198.18.0.1":          false,
		"::1":                 false,
		"::":                  false,
		"fe80::1":             false,
		"fc00::1":             false,
		"fd12::1":             false,
		"ff02::1":             false,
		"::ffff:127.0.0.1":    false,
		"::ffff:169.254.1.1":  false,
		"64:ff9b::a9fe:a9fe":  false,
		"2002:7f00:1::":       false,
		"2001:0:4136:e378::1": false,
	}
	for s, want := range tests {
		assert.Equal(t, want, Public(netip.MustParseAddr(s)), s)
	}
}

func TestCheckAddrs(t *testing.T) {
	pub, loop, meta := netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")
	// A public name that also resolves inside keeps only its public address.
	got, err := checkAddrs(Rule{Host: "a.example.com"}, "a.example.com", []netip.Addr{loop, pub, meta})
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{pub}, got)
	// Only private answers: refused, naming them and the way out.
	_, err = checkAddrs(Rule{Host: "a.example.com"}, "a.example.com", []netip.Addr{loop, meta})
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "127.0.0.1, 169.254.169.254")
	assert.Contains(t, err.Error(), `"private": true`)
	// Private on an exact name allows them.
	got, err = checkAddrs(Rule{Host: "a.example.com", Private: true}, "a.example.com", []netip.Addr{loop})
	require.NoError(t, err)
	assert.Equal(t, []netip.Addr{loop}, got)
	// No answer at all.
	_, err = checkAddrs(Rule{Host: "a.example.com"}, "a.example.com", nil)
	assert.True(t, errors.Is(err, ErrRefused))
}
