package middleware_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCoreDependencies keeps the core middleware package light for the
// gateways that import it: no hook runtime, no YAML, no MCP SDK, no model
// SDKs (those come with the agentbox package's config-driven wiring and
// middleware/modelroute).
func TestCoreDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err, "go list -deps")
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/agentbox/agentbox/middleware")
	for _, banned := range []string{
		"github.com/dop251/goja", "github.com/evanw/esbuild", "github.com/goccy/go-yaml", "go.yaml.in/yaml",
		"gopkg.in/yaml", "github.com/modelcontextprotocol/", "github.com/anthropics/", "github.com/openai/",
		"github.com/agentbox/agentbox/config", "github.com/agentbox/agentbox/jsapi",
		"github.com/agentbox/agentbox/services/mcphost", "github.com/agentbox/agentbox/executor/helper",
	} {
		for _, d := range deps {
			assert.False(t, strings.HasPrefix(d, banned), "middleware depends on %s", d)
		}
	}
}
