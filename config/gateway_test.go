package config

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadFixture loads testdata/gateway, shaped like the seed's
// assistants/coder and assistants/qa, and checks the loaded values.
func TestLoadFixture(t *testing.T) {
	g, err := Load("testdata/gateway", testOptions())
	require.NoError(t, err)

	golden(t, "fixture/problems.golden", render(g, nil))
	b, err := json.MarshalIndent(g.Assistants, "", "  ")
	require.NoError(t, err)
	golden(t, "fixture/assistants.golden.json", string(b)+"\n")

	require.Len(t, g.Connectors, 3)
	ds := g.Connectors["deepseek.v3"]
	require.NotNil(t, ds)
	assert.Equal(t, "https://api.deepseek.com/anthropic", ds.Host)
	assert.Equal(t, "deepseek-chat", ds.Model)
	assert.Equal(t, "sk-deepseek", ds.Key.Reveal())
	assert.Equal(t, "DEEPSEEK_API_KEY", ds.KeyEnv)
	assert.Equal(t, "https://api.anthropic.com", g.Connectors["anthropic.sonnet"].Host, "default host per type")

	qa := g.Assistants["qa"]
	require.NotNil(t, qa)
	assert.Nil(t, qa.Sandbox, "no sandbox block: a plain assistant")
	assert.Same(t, ds, qa.Connector)

	coder := g.Assistants["coder"]
	require.NotNil(t, coder)
	require.NotNil(t, coder.Sandbox)
	sb := coder.Sandbox
	assert.Equal(t, "claude", sb.Command)
	assert.Equal(t, int64(4<<30), sb.MemoryBytes)
	assert.InDelta(t, 2.0, sb.CPUs, 0)
	assert.Equal(t, 10*time.Minute, sb.Timeout)
	assert.Equal(t, map[string]any{"max_turns": 20, "permission_mode": "acceptEdits", "allowed_tools": []string{"Bash(git:*)", "Read"}}, sb.Arguments)
	// Defaults applied for what the file leaves out.
	assert.Equal(t, DefaultPidsLimit, sb.PidsLimit)
	assert.Equal(t, "none", sb.Network)
	assert.Equal(t, DefaultUser, sb.User)
	assert.Equal(t, PolicyRequest, sb.Policy)
	assert.Equal(t, DefaultHookTimeout, sb.HookTimeout)

	assert.Equal(t, filepath.Join(g.Dir, "assistants/coder/src/index.ts"), coder.Hooks)
	assert.Equal(t, "You are a careful software engineer.\nWork in /workspace and explain what you changed.\n\nPrefer small, reviewed changes.", coder.SystemPrompt())

	names := make([]string, 0, len(coder.Skills))
	for _, s := range coder.Skills {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"code-review", "deploy", "long-description"}, names, "misnamed and no-front-matter are excluded")
	cr := coder.Skills[0]
	assert.True(t, cr.Scripts)
	assert.True(t, cr.References)
	assert.False(t, cr.Assets)
	assert.Equal(t, []string{"Bash(git:*)", "Read"}, cr.AllowedTools)
	assert.Equal(t, map[string]string{"author": "yao-team", "version": "1.0"}, cr.Metadata)

	assert.Equal(t, []string{
		"mcp__filesystem__read_file", "mcp__filesystem__write_file", "mcp__filesystem__list_directory", "mcp__search",
	}, coder.MCPAllowedTools())

	pair := g.Assistants["pair"]
	require.NotNil(t, pair.Sandbox)
	assert.Equal(t, "agentbox/sandbox-cursor:latest", pair.Sandbox.Image)
	assert.Equal(t, DefaultIdleTTL, pair.Sandbox.IdleTTL, "session policy gets the default idle TTL")
}

func TestMCPConfig(t *testing.T) {
	g, err := Load("testdata/gateway", testOptions())
	require.NoError(t, err)
	coder := g.Assistants["coder"]

	direct, err := coder.MCPConfig(nil)
	require.NoError(t, err)
	golden(t, "fixture/mcp.direct.golden.json", string(direct)+"\n")
	assert.Contains(t, string(direct), "Bearer search", "without a transform, resolved secrets are in the output")

	relayed, err := coder.MCPConfig(HelperRelay)
	require.NoError(t, err)
	golden(t, "fixture/mcp.relay.golden.json", string(relayed)+"\n")
	var parsed struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	require.NoError(t, json.Unmarshal(relayed, &parsed))
	require.Len(t, parsed.MCPServers, 2)
	for id, s := range parsed.MCPServers {
		assert.Equal(t, "agentbox-helper", s.Command)
		assert.Equal(t, []string{"mcp", "--server", id}, s.Args)
		assert.Empty(t, s.Env)
	}
	assert.NotContains(t, string(relayed), "Bearer search", "the relay keeps secrets on the host")

	none, err := g.Assistants["qa"].MCPConfig(HelperRelay)
	require.NoError(t, err)
	assert.Nil(t, none)
}

func TestLoadAssistant(t *testing.T) {
	a, err := LoadAssistant("testdata/gateway", "coder", testOptions())
	require.NoError(t, err)
	assert.Equal(t, "Coder Assistant", a.Name)
	assert.NotEmpty(t, a.Problems, "skill warnings are kept on the assistant")

	_, err = LoadAssistant("testdata/gateway", "nope", testOptions())
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "assistants/nope: no such assistant directory")

	opts := testOptions()
	opts.LookupEnv = env(map[string]string{})
	_, err = LoadAssistant("testdata/gateway", "qa", opts)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "environment variable DEEPSEEK_API_KEY is not set")
}

func TestSandboxSpecAndHash(t *testing.T) {
	base := func(extra ...string) *Sandbox {
		root := writeTree(t, with(coder("deepseek.v3", append([]string{`"command": "claude"`}, extra...)...)))
		a, err := LoadAssistant(root, "coder", testOptions())
		require.NoError(t, err)
		return a.Sandbox
	}
	defaults := base()
	spec := defaults.Spec()
	assert.Equal(t, executor.Spec{
		Image: "agentbox/sandbox-claude:latest", MemoryBytes: 2 << 30, CPUs: 1, PidsLimit: 256,
		Timeout: 10 * time.Minute, Network: "none", Runtime: "", User: DefaultUser,
		ConfigHash: defaults.ConfigHash(), LeaseWait: 30 * time.Second,
		DiskBytes: 2 << 30, Inodes: 200_000,
	}, spec)
	assert.Len(t, spec.ConfigHash, 64)

	// Spelling out the defaults, reordering keys and comments change nothing.
	spelled := base(`"pids": 256`, `// a comment`+"\n    "+`"network": "none"`, `"max_memory": "2048m"`, `"user": "`+DefaultUser+`"`)
	assert.Equal(t, defaults.ConfigHash(), spelled.ConfigHash())

	for name, extra := range map[string]string{
		"memory":    `"max_memory": "3g"`,
		"cpu":       `"max_cpu": 1.5`,
		"runtime":   `"runtime": "runsc"`,
		"arguments": `"arguments": {"max_turns": 3}`,
		"image":     `"image": "example/other:1"`,
		"disk":      `"max_disk": "4g"`,
		"inodes":    `"max_inodes": 1000`,
	} {
		assert.NotEqual(t, defaults.ConfigHash(), base(extra).ConfigHash(), name)
	}
	// A small max_disk lowers the default inode quota with it.
	small := base(`"max_disk": "32m"`)
	assert.Equal(t, [2]int64{32 << 20, 4096}, [2]int64{small.Spec().DiskBytes, small.Spec().Inodes})
	assert.Equal(t, int64(1234), base(`"max_inodes": 1234`).Spec().Inodes)
	// The hash does not depend on the process: a fixed input gives a fixed value.
	fixed := &Sandbox{Command: "claude", Arguments: map[string]any{}}
	applyDefaults(fixed)
	assert.Equal(t, defaults.ConfigHash(), fixed.ConfigHash())
}

func TestSecretRedacted(t *testing.T) {
	c := Connector{ID: "x", Key: "sk-secret"}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "sk-secret")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		assert.NotContains(t, sprintf(verb, c), "sk-secret", verb)
	}
	assert.Equal(t, "sk-secret", c.Key.Reveal())
}

func TestParseSize(t *testing.T) {
	cases := map[string]struct {
		in   string
		want int64
		bad  bool
	}{
		"gigabytes":  {in: "4g", want: 4 << 30},
		"upper":      {in: "4G", want: 4 << 30},
		"gb suffix":  {in: "4gb", want: 4 << 30},
		"gib suffix": {in: "4GiB", want: 4 << 30},
		"megabytes":  {in: "512m", want: 512 << 20},
		"kilobytes":  {in: "1024k", want: 1 << 20},
		"fraction":   {in: "1.5g", want: 3 << 29},
		"bytes":      {in: "1048576", want: 1 << 20},
		"bad unit":   {in: "4x", bad: true},
		"negative":   {in: "-1g", bad: true},
		"empty":      {in: "", bad: true},
		"words":      {in: "four gigs", bad: true},
		"overflow":   {in: "99999999999t", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseSize(tc.in)
			if tc.bad {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, "2g", formatSize(2<<30))
	assert.Equal(t, "1536m", formatSize(3<<29))
	assert.Equal(t, "1000", formatSize(1000))
}

func TestSplitTools(t *testing.T) {
	assert.Equal(t, []string{"Read", "Bash(git diff:*)", "mcp__x__y"}, splitTools("Read  Bash(git diff:*)\tmcp__x__y"))
	assert.Equal(t, []string{"Read", "Grep"}, splitTools("Read, Grep"))
	assert.Nil(t, splitTools("  "))
}

func TestSuggest(t *testing.T) {
	cases := map[string]struct {
		word string
		want string
	}{
		"typo":      {"comand", `did you mean "command"?`},
		"prefix":    {"max_mem", `did you mean "max_memory"?`},
		"case":      {"Network", `did you mean "network"?`},
		"far":       {"colour", ""},
		"too short": {"x", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, suggest(tc.word, optionKeys()))
		})
	}
}

// TestMCPConfigGatewayTransport: a "gateway" server is always reached
// through the helper relay, with or without a transform.
func TestMCPConfigGatewayTransport(t *testing.T) {
	a := &Assistant{MCP: []MCPUse{{ServerID: "orders", Tools: []string{"lookup"},
		Server: &MCPServer{ID: "orders", Transport: TransportGateway}}}}
	for _, tr := range []MCPTransform{nil, HelperRelay} {
		b, err := a.MCPConfig(tr)
		require.NoError(t, err)
		assert.JSONEq(t, `{"mcpServers":{"orders":{"command":"agentbox-helper","args":["mcp","--server","orders"]}}}`, string(b))
	}
	assert.Equal(t, []string{"mcp__orders__lookup"}, a.MCPAllowedTools())
}
