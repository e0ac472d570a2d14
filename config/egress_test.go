package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEgressLoads: sandbox.egress lands in Sandbox.Egress in the forms the
// proxy takes, turns Spec().Egress on and changes the config hash; without
// it the hash is what it was before the key existed (omitempty).
func TestEgressLoads(t *testing.T) {
	root := writeTree(t, with(
		coder("deepseek.v3", `"command": "claude"`, `"egress": ["registry.npmjs.org", "*.github.com:443", "10.0.0.5:8080", "[2001:db8::1]:443", {"host": "pkgs.internal:8081", "private": true, "secret": {"env": "DEEPSEEK_API_KEY", "header": "X-Token", "prefix": "Token "}}]`),
		coderAs("none", `"timeout": "10m"`)))
	g, err := Load(root, testOptions())
	require.NoError(t, err)
	sb := g.Assistants["coder"].Sandbox
	assert.Equal(t, []EgressRule{
		{Host: "registry.npmjs.org"},
		{Host: "*.github.com", Port: 443},
		{Host: "10.0.0.5", Port: 8080},
		{Host: "2001:db8::1", Port: 443},
		{Host: "pkgs.internal", Port: 8081, Private: true, Secret: &EgressSecret{Env: "DEEPSEEK_API_KEY", Header: "X-Token", Prefix: "Token "}},
	}, sb.Egress)
	assert.True(t, sb.Spec().Egress)
	none := g.Assistants["coder_none"].Sandbox
	assert.False(t, none.Spec().Egress)
	assert.Empty(t, none.Egress)
	assert.NotEqual(t, sb.ConfigHash(), none.ConfigHash())
	b, err := none.MarshalJSON()
	require.NoError(t, err)
	assert.NotContains(t, string(b), "egress", "an assistant without egress hashes as before")
	full, err := sb.MarshalJSON()
	require.NoError(t, err)
	assert.NotContains(t, string(full), "sk-", "the secret's value is never in the loaded config")
}
