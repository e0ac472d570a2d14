package codex_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
	sr "github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
	"github.com/agentbox/agentbox/services/modelproxy"
)

// turn2Command is the later turn's command: it shows whether a planted
// rule forbids echo and whether the run's token reached the command.
const turn2Command = `echo turn2-ran; env | grep -c -e AGENTBOX_MODEL_TOKEN -e tok- || true`

// TestAttackPlantedCodexConfig: configuration the agent writes into the
// workspace in turn 1 (.codex's config.toml, execpolicy rules, hooks,
// instructions and prompts; /etc/codex if it could) does not take effect
// in turn 2: no planted command runs (notify, an MCP server, a hook), the
// model traffic still reaches the gateway's upstream with the connector's
// key, the planted instructions reach no model, a planted rule forbids
// nothing and the agent's commands get no token. The workspace's
// AGENTS.md reaches the model as the project's text, as Claude Code's
// CLAUDE.md does. HOME is the gateway's at every run (a new container's,
// or rebuilt in a kept one: examples/gateway TestCodexAttackPlantedHome).
func TestAttackPlantedCodexConfig(t *testing.T) {
	env := newE2E(t)
	plant := sr.PlantCodexConfig + `plant /workspace/.codex project
printf 'PROJECT-AGENTS-TEXT\n' > /workspace/AGENTS.md
{ mkdir -p /etc/codex && plant /etc/codex system; } 2>/dev/null || echo etc-refused
echo planted-done`
	api1 := sr.Start(sr.WithScript(func(r *sr.Request) sr.Turn {
		if outputs(r) == 0 {
			return sr.Turn{Calls: []sr.Call{sr.Shell(plant)}}
		}
		return sr.Say("planted")
	}))
	defer api1.Close()
	r1 := env.run(t, "planted", api1, executor.RunRequest{Messages: user("plant")}, e2eOpts{})
	require.NoError(t, r1.Err)
	reqs1 := api1.ResponseRequests()
	require.Len(t, reqs1, 2)
	planted := lastOutput(reqs1[1])
	require.Contains(t, planted, "planted-done", "the plant ran")
	assert.Contains(t, planted, "etc-refused", "the agent cannot write /etc/codex")

	var out string
	api2 := sr.Start(sr.WithScript(func(r *sr.Request) sr.Turn {
		if outputs(r) > 0 {
			out = lastOutput(r)
			return sr.Say("done")
		}
		return sr.Turn{Calls: []sr.Call{sr.Shell(turn2Command)}}
	}))
	defer api2.Close()
	var left []string
	r2 := env.run(t, "planted", api2, executor.RunRequest{Messages: user("go on")}, e2eOpts{
		before: func(sb executor.Sandbox, _ executor.RunRequest) { clearMarkers(t, sb) }, // turn 1's are not the point
		after:  func(sb executor.Sandbox) { left = markers(t, sb) },
	})
	require.NoError(t, r2.Err)
	assert.False(t, r2.Completion.IsError, "%v", r2.Completion.Errors)
	reqs2 := api2.ResponseRequests()
	require.Len(t, reqs2, 2, "the model calls reached the gateway's upstream, not the planted provider")
	for _, req := range reqs2 {
		assert.Equal(t, connectorKey, req.APIKey)
		text := req.AllText()
		assert.NotContains(t, text, "PLANTED-", "no planted instructions, .codex/AGENTS.md or prompt")
		assert.Contains(t, text, "PROJECT-AGENTS-TEXT", "the workspace's AGENTS.md is the project's text")
		for _, name := range req.ToolNames() {
			assert.NotContains(t, name, "planted", "no planted MCP server's tools")
		}
	}
	assert.Equal(t, "turn2-ran\n0", strings.TrimSpace(out), "a planted rule forbade nothing, and the command's environment holds no token")
	assert.Empty(t, left, "no planted notify, MCP server or hook ran")
	assert.NotContains(t, r2.proxy, "refused", "the CLI called nothing the proxy refuses")
}

// TestAttackModelThatLoops: a model that answers every call with another
// command never ends the run by itself; the model proxy's calls budget
// refuses the next call (and the CLI's bounded retries of it), and the
// run ends with an error naming the budget, the upstream having seen the
// budget's calls and no more.
func TestAttackModelThatLoops(t *testing.T) {
	env := newE2E(t)
	api := sr.Start(sr.WithScript(func(*sr.Request) sr.Turn { return sr.Turn{Calls: []sr.Call{sr.Shell("echo again")}} }))
	defer api.Close()
	run := env.run(t, "loop", api, executor.RunRequest{Messages: user("loop")}, e2eOpts{proxy: func(o *modelproxy.Options) { o.Budget.MaxRequests = 4 }})
	assert.Equal(t, modelproxy.BudgetCalls, run.stop)
	assert.Len(t, api.ResponseRequests(), 4, "the upstream saw the budget's calls and no more")
	assert.True(t, run.Completion.IsError, "the run failed")
	assert.Contains(t, strings.Join(run.Completion.Errors, " "), "budget", "the error names the budget")
	refused := 0
	for _, c := range run.calls {
		if c.Status != 200 {
			refused++
		}
	}
	// The CLI retries a refused call as a broken stream, max_retries
	// times; the refusals cost nothing upstream.
	assert.Equal(t, 1+codex.DefaultMaxRetries, refused, "the refused calls: the first and the CLI's retries, no more: %+v", run.calls)
}

// TestAttackRequestBodyPastLimits: a turn whose request is over the model
// proxy's body cap (here a prompt past a small cap, as a workspace file
// the agent reads into its context past the real one) is refused with 413
// before anything goes upstream, each of the CLI's bounded retries too,
// and the run ends with the proxy's error, not a hang.
func TestAttackRequestBodyPastLimits(t *testing.T) {
	env := newE2E(t)
	api := sr.Start(sr.WithTurns(sr.Say("never")))
	defer api.Close()
	prompt := strings.Repeat("too long ", 30_000)
	run := env.run(t, "body", api, executor.RunRequest{Messages: user(prompt)}, e2eOpts{proxy: func(o *modelproxy.Options) { o.MaxRequestBytes = 128 << 10 }})
	assert.Empty(t, api.ResponseRequests(), "nothing reached the upstream")
	assert.Empty(t, run.calls, "no call was forwarded")
	assert.True(t, run.Completion.IsError)
	assert.Equal(t, 413, run.Completion.APIErrorStatus)
	assert.Contains(t, strings.Join(run.Completion.Errors, " "), "caps request size", "the proxy's reason reaches the run's error")
	// The CLI retries the refusal as a broken stream, max_retries times.
	assert.Equal(t, 1+codex.DefaultMaxRetries, strings.Count(run.proxy, "status=413"), "refused at the cap, then the CLI's retries, no more")
}

// outputs counts the tool outputs in r's input.
func outputs(r *sr.Request) int {
	n := 0
	for _, it := range r.Body.Input {
		if it.Type == "function_call_output" {
			n++
		}
	}
	return n
}

// lastOutput is the command output of the last tool output in r's input.
func lastOutput(r *sr.Request) string {
	for i := len(r.Body.Input) - 1; i >= 0; i-- {
		if it := r.Body.Input[i]; it.Type == "function_call_output" {
			return sr.ToolResult{Output: it.Output.Text()}.CommandOutput()
		}
	}
	return ""
}

// markers lists the planted commands' markers in sb's workspace,
// through the sandbox's shell.
func markers(t *testing.T, sb executor.Sandbox) []string {
	t.Helper()
	var out strings.Builder
	_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "ls -a /workspace | grep '^.marker-' || true"}, Stdout: &out})
	require.NoError(t, err)
	return strings.Fields(out.String())
}

// clearMarkers removes the markers from sb's workspace.
func clearMarkers(t *testing.T, sb executor.Sandbox) {
	t.Helper()
	_, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", "rm -f /workspace/.marker-*"}})
	require.NoError(t, err)
}
