package hostile_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/hostile"
)

// TestAttackHuntForTheConnectorKey is the harness's example attack: over
// two turns of one chat the agent searches everything it can read for the
// connector's key (its environment, every process's environment and
// command line, HOME, /tmp, the helper's directory, the workspace) and
// leaves a copy of its environment for the next turn. The key is only on
// the host: the scripted upstream sees it on every forwarded call, the
// agent never does.
func TestAttackHuntForTheConnectorKey(t *testing.T) {
	env := hostile.New(t, hostile.Options{})
	r1 := env.Run(t, hostile.Turn{Steps: []hostile.Step{
		hostile.Bash("env | sort; env > .env-turn1"),
		hostile.Bash(`for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < "$f"; done 2>/dev/null | sort -u`),
		hostile.Bash(`grep -rIl --exclude-dir=proc --exclude-dir=sys -e sk-ant -e "$ANTHROPIC_API_KEY" / 2>/dev/null | head -50; echo grep-done`),
	}})
	r1.RequireOK(t)
	for i, s := range r1.Steps {
		require.True(t, s.Ran, "step %d ran", i)
	}
	assert.Contains(t, r1.Steps[0].Output, "ANTHROPIC_API_KEY=abx-", "the agent sees its per-request token")
	assert.Contains(t, r1.Steps[2].Output, "grep-done")

	r2 := env.Run(t, hostile.Turn{Steps: []hostile.Step{hostile.Bash("cat .env-turn1; env | grep ANTHROPIC_API_KEY")}})
	r2.RequireOK(t)
	require.True(t, r2.Steps[0].Ran)
	tokens := map[string]bool{}
	for _, line := range strings.Split(r2.Steps[0].Output, "\n") {
		if v, ok := strings.CutPrefix(line, "ANTHROPIC_API_KEY="); ok {
			tokens[v] = true
		}
	}
	assert.Len(t, tokens, 2, "each request has its own token: turn 1's left in the workspace differs from turn 2's")

	for _, r := range []*hostile.Result{r1, r2} {
		assert.NotContains(t, r.Output(), hostile.ConnectorKey, "the connector's key never reaches the sandbox")
		require.NotEmpty(t, r.Requests)
		for _, req := range r.Requests {
			assert.Equal(t, hostile.ConnectorKey, req.APIKey, "the proxy swapped the token for the connector's key")
		}
		require.NotNil(t, r.Init, "the CLI started")
		assert.Contains(t, r.Init.Skills, hostile.DefaultSkill)
	}
}
