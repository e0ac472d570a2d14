package agentbox_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/services/egress"
)

// loadFixture loads config's fixture gateway (coder with skills, MCP
// servers and hooks; qa without sandbox; pair on cursor).
func loadFixture(t *testing.T) *config.Gateway {
	t.Helper()
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-fixture", "DEEPSEEK_API_KEY": "sk-ds", "CURSOR_API_KEY": "cur-key", "SEARCH_TOKEN": "search-tok"}
	g, err := config.Load(filepath.Join("config", "testdata", "gateway"), config.LoadOptions{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, HostCPUs: -1, HostMemoryBytes: -1,
	})
	require.NoError(t, err)
	return g
}

func TestCatalogFromConfig(t *testing.T) {
	g := loadFixture(t)
	var compiled []string
	cat, err := agentbox.CatalogFromConfig(g, agentbox.ConfigOptions{
		Hooks: func(a *config.Assistant) (hooks.Hooks, error) {
			compiled = append(compiled, a.ID)
			return hooks.Funcs{}, nil
		},
	})
	require.NoError(t, err)
	list, err := cat.List(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, a := range list {
		ids = append(ids, a.ID)
	}
	assert.Equal(t, []string{"coder", "pair", "qa"}, ids)
	assert.Equal(t, []string{"coder"}, compiled, "only coder has hooks")

	qa, err := cat.Lookup(context.Background(), "qa")
	require.NoError(t, err)
	assert.Nil(t, qa.Sandbox, "no sandbox block: pass-through")

	coder, err := cat.Lookup(context.Background(), "coder")
	require.NoError(t, err)
	require.NotNil(t, coder.Sandbox)
	ca := g.Assistants["coder"]
	sb := coder.Sandbox
	assert.Equal(t, ca.Sandbox.Command, sb.Runner)
	assert.Equal(t, ca.Sandbox.Image, sb.Spec.Image)
	assert.Equal(t, ca.Sandbox.MemoryBytes, sb.Spec.MemoryBytes)
	assert.Equal(t, ca.Sandbox.Timeout, sb.Spec.Timeout)
	assert.Equal(t, ca.Sandbox.ConfigHash(), sb.Spec.ConfigHash)
	assert.Equal(t, ca.Sandbox.StallTimeout, sb.StallTimeout)
	assert.False(t, sb.OmitEnvironment, "the environment summary is on by default")
	ca.Sandbox.OmitEnvironmentPrompt = true
	off, err := agentbox.CatalogFromConfig(g, agentbox.ConfigOptions{Hooks: func(*config.Assistant) (hooks.Hooks, error) { return hooks.Funcs{}, nil }})
	require.NoError(t, err)
	offCoder, err := off.Lookup(context.Background(), "coder")
	require.NoError(t, err)
	assert.True(t, offCoder.Sandbox.OmitEnvironment, "sandbox.environment_prompt: false reaches the middleware")
	assert.Equal(t, ca.SystemPrompt(), sb.Run.SystemPrompt)
	assert.NotEmpty(t, sb.Run.SystemPrompt)
	assert.Equal(t, ca.Connector.Model, sb.Run.Model)
	assert.Equal(t, middleware.Connector{Upstream: ca.Connector.Host, Key: "sk-ds"}, sb.Connector, "coder uses the deepseek connector")
	assert.Equal(t, ca.MCPAllowedTools(), sb.Run.AllowedTools)
	assert.JSONEq(t, string(mustMCP(t, ca)), string(sb.Run.MCPConfig))

	assert.False(t, sb.DirectModel)
	pair, err := cat.Lookup(context.Background(), "pair")
	require.NoError(t, err)
	require.NotNil(t, pair.Sandbox)
	assert.True(t, pair.Sandbox.DirectModel, "cursor reaches its vendor with the connector's key")
	assert.Equal(t, "cur-key", pair.Sandbox.Connector.Key)

	var files []string
	for name := range sb.HomeFiles {
		files = append(files, name)
	}
	sort.Strings(files)
	assert.Contains(t, files, ".claude/skills/code-review/SKILL.md")
	assert.Contains(t, files, ".claude/skills/code-review/scripts/lint.sh")
	assert.NotContains(t, files, ".claude/skills/misnamed/SKILL.md", "refused skills are not placed")

	// The catalog passes the Orchestrator's validation with the runners
	// it names, on a backend that can do what they ask (the helper's
	// model relay, kept sandboxes for the session policy), as Docker's
	// with the helper can.
	_, err = middleware.New(context.Background(), middleware.Options{
		Catalog: cat,
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) {
			ex := executortest.NewExecutor(t)
			caps := executortest.FakeCapabilities()
			caps.ModelRelay, caps.Keep = true, true
			ex.Caps = &caps
			return ex, nil
		},
		Runners:     []executor.Runner{namedRunner("claude"), namedRunner("cursor")},
		ModelRouter: modelroute.New(modelroute.Options{}),
	})
	require.NoError(t, err)
}

func mustMCP(t *testing.T, a *config.Assistant) []byte {
	t.Helper()
	b, err := a.MCPConfig(nil)
	require.NoError(t, err)
	return b
}

func TestCatalogFromConfigErrors(t *testing.T) {
	g := loadFixture(t)
	_, err := agentbox.CatalogFromConfig(g, agentbox.ConfigOptions{Hooks: func(*config.Assistant) (hooks.Hooks, error) {
		return nil, errors.New("src/index.ts:3:7: syntax error")
	}})
	assert.ErrorContains(t, err, `assistant "coder": hooks: src/index.ts:3:7: syntax error`)
}

// namedRunner is a Runner that only has a name, for validation.
type namedRunner string

func (r namedRunner) Name() string { return string(r) }
func (r namedRunner) Invocation(executor.RunRequest) (executor.Invocation, error) {
	return executor.Invocation{}, errors.New("namedRunner does not run")
}
func (r namedRunner) Parse(context.Context, io.Reader, func(executor.Event) error) (executor.Completion, error) {
	return executor.Completion{}, errors.New("namedRunner does not parse")
}

func TestCatalogFromConfigCompilesHooksWithJSAPI(t *testing.T) {
	g := loadFixture(t)
	cat, err := agentbox.CatalogFromConfig(g, agentbox.ConfigOptions{})
	require.NoError(t, err)
	coder, err := cat.Lookup(context.Background(), "coder")
	require.NoError(t, err)
	require.NotNil(t, coder.Hooks, "src/index.ts compiled by jsapi")
	assert.True(t, coder.Hooks.HasCreate() || coder.Hooks.HasNext())
}

// TestCatalogEgressCA: an assistant whose egress has a secret trusts the
// gateway's egress CA (its spec's environment points the usual tools at
// the files the egress route installs); one without a secret does not.
func TestCatalogEgressCA(t *testing.T) {
	g := loadFixture(t)
	ca := g.Assistants["coder"]
	ca.Sandbox.Egress = []config.EgressRule{{Host: "registry.test", Secret: &config.EgressSecret{Env: "SEARCH_TOKEN"}}}
	cat, err := agentbox.CatalogFromConfig(g, agentbox.ConfigOptions{Hooks: func(*config.Assistant) (hooks.Hooks, error) { return hooks.Funcs{}, nil }})
	require.NoError(t, err)
	coder, err := cat.Lookup(context.Background(), "coder")
	require.NoError(t, err)
	assert.Subset(t, coder.Sandbox.Spec.Env, egress.CAEnv(middleware.DefaultHome))
	assert.True(t, coder.Sandbox.Egress.Intercepts())

	ca.Sandbox.Egress = []config.EgressRule{{Host: "registry.test"}}
	cat, err = agentbox.CatalogFromConfig(g, agentbox.ConfigOptions{Hooks: func(*config.Assistant) (hooks.Hooks, error) { return hooks.Funcs{}, nil }})
	require.NoError(t, err)
	coder, err = cat.Lookup(context.Background(), "coder")
	require.NoError(t, err)
	for _, kv := range coder.Sandbox.Spec.Env {
		assert.NotContains(t, kv, "SSL_CERT_FILE", "no CA without a secret")
	}
}
