package modelroute_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/hostile"
	"github.com/agentbox/agentbox/middleware/modelroute"
)

// rawReq is a shell function for the agent's Bash: one raw HTTP request to
// the model endpoint the CLI was given (busybox nc; the image has no curl),
// printing the status line and the last line of the answer. nc's input
// stays open a moment: a client that half-closes is a client gone, to
// net/http, and its forwarded call is cancelled.
const rawReq = `port=${ANTHROPIC_BASE_URL##*:}; port=${port%%/*}
req() {
  r=$({ printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: %s\r\ncontent-type: application/json\r\nX-Forwarded-For: 10.0.0.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$1" "$2" "$ANTHROPIC_API_KEY" "${#3}" "$3"; sleep ${HOLD:-0}; } | nc -w 10 127.0.0.1 "$port" 2>&1)
  echo "$1 $2 -> $(echo "$r" | head -1 | tr -d '\r') $(echo "$r" | tail -1 | cut -c1-300)"
}
`

// TestHostileAgentCallsOtherAPIs is finding 1 of issue 14 through the real
// stack: the agent, from the container's Bash, with its per-request token,
// tries the Files, Batches, Models and organisation APIs, other methods
// and path tricks against the model proxy. Every attempt is refused with
// Anthropic's error JSON, nothing but the CLI's own POST /v1/messages
// reaches the upstream, and the host logs a WARN line per refusal.
func TestHostileAgentCallsOtherAPIs(t *testing.T) {
	env := hostile.New(t, hostile.Options{})
	attempts := []string{"GET /v1/files", "GET /v1/files/file_011/content", "DELETE /v1/files/file_011", "POST /v1/files",
		"POST /v1/messages/batches", "GET /v1/messages/batches", "GET /v1/organizations/me", "GET /v1/models",
		"CONNECT api.anthropic.com:443", "PUT /v1/messages", "POST /v1/messages/../files", "POST /v1/messages/%2e%2e/files",
		"POST //v1/messages", "POST /v1%2Fmessages", "POST /v1/messages?limit=1", "POST http://api.anthropic.com/v1/files"}
	var script strings.Builder
	script.WriteString(rawReq)
	for _, a := range attempts {
		m, target, _ := strings.Cut(a, " ")
		script.WriteString("req " + m + " '" + target + "' '{}'\n")
	}
	r := env.Run(t, hostile.Turn{Chat: "proxy-endpoints", Steps: []hostile.Step{hostile.Bash(script.String())}})
	r.RequireOK(t)
	require.True(t, r.Steps[0].Ran)
	out := r.Steps[0].Output
	t.Logf("what the agent saw:\n%s", out)
	for _, a := range attempts {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, a+" -> ") {
				line = l
			}
		}
		require.NotEmpty(t, line, "attempt %q ran", a)
		assert.Contains(t, line, "HTTP/1.1 403", a)
		assert.Contains(t, line, `"type":"permission_error"`, a)
	}
	for _, req := range env.API.Requests() {
		assert.True(t, req.Method == "POST" && (req.Path == "/v1/messages" || req.Path == "/v1/messages/count_tokens"),
			"%s %s reached the upstream", req.Method, req.Path)
		assert.Empty(t, req.Header.Get("X-Forwarded-For"))
	}
	log := env.Log()
	assert.GreaterOrEqual(t, strings.Count(log, "model call refused:"), len(attempts), "one WARN line per refusal")
	assert.Contains(t, log, "uri=/v1/files")
	assert.Regexp(t, `model call refused:.* chat=proxy-endpoints .*user=mallory`, log, "the warn line names the user and chat")
}

// TestHostileModelLoopStopsAtBudget is finding 2 of issue 14 through the
// real stack: the agent loops model calls for another model with
// max_tokens 64000. The default budget (4*max_turns+10 calls, max_turns 40
// in the harness) stops the loop and with it the run, whose error names
// the budget; every call that reached the upstream was pinned to the
// connector's model with max_tokens capped, and not one more than the
// budget got through.
func TestHostileModelLoopStopsAtBudget(t *testing.T) {
	env := hostile.New(t, hostile.Options{})
	budget := modelroute.DefaultBudget(env.Assistants[hostile.DefaultAssistant]).MaxRequests
	r := env.Run(t, hostile.Turn{Chat: "proxy-budget", Steps: []hostile.Step{hostile.Bash(rawReq + `ok=0
b='{"model":"claude-opus-4-1","max_tokens":64000,"messages":[{"role":"user","content":"loop"}]}'
for i in $(seq 1 ` + strconv.Itoa(budget+50) + `); do
  if wget -q -O /dev/null --header "x-api-key: $ANTHROPIC_API_KEY" --header 'content-type: application/json' --post-data "$b" "$ANTHROPIC_BASE_URL/v1/messages?beta=true" 2>/tmp/err; then
    ok=$((ok+1))
  else
    echo "refused at call $i: $(cat /tmp/err)"; HOLD=1 req POST '/v1/messages?beta=true' "$b"; break
  fi
done
echo "calls that got through: $ok"`)}})
	// The loop spends the budget, so the CLI's next call is refused and
	// the run ends with the refusal as its error: the tool's output never
	// makes it back to the model.
	require.Error(t, r.Err, "the run ends when the budget is spent")
	want := fmt.Sprintf("request budget exceeded: %d of %d model calls made", budget, budget)
	assert.Contains(t, r.Err.Error(), want, "the error names the budget")
	msgs := 0
	for _, req := range env.API.MessageRequests() {
		msgs++
		assert.Equal(t, hostile.Model, req.Body.Model, "model pinned")
		assert.LessOrEqual(t, req.Body.MaxTokens, 32000, "max_tokens capped")
	}
	assert.Equal(t, budget, msgs, "the loop spent the whole budget and not one call more reached the upstream")
	assert.Contains(t, env.Log(), "model call refused", "the refusals are logged")
	t.Logf("budget %d calls; the upstream saw %d messages calls; the run ended with: %v", budget, msgs, r.Err)
}

// TestHostileAgentSendsAmbiguousBodies is issue 32's class through the
// real stack, from the agent's side: from the container's Bash, with its
// per-request token, the agent sends model calls that the proxy and the
// upstream could read differently, hoping to pass one of them a server
// tool the proxy refuses (web_fetch, which would reach the network for an
// agent that has none), another model, or an uncapped max_tokens. Each
// is refused with Anthropic's 400, and none reaches the upstream.
func TestHostileAgentSendsAmbiguousBodies(t *testing.T) {
	env := hostile.New(t, hostile.Options{})
	bodies := map[string]string{
		"hidden server tool":  `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","type":"web_fetch_20250910","name":"f"}]}`,
		"escaped server tool": `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"typ\u0065":"web_fetch_20250910","name":"f"}]}`,
		"second model":        `{"model":"m","mod\u0065l":"claude-opus-4-1","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
		"case max_tokens":     `{"model":"m","max_tokens":5,"Max_Tokens":64000,"messages":[{"role":"user","content":"x"}]}`,
		"nested duplicate":    `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x","content":"y"}]}`,
		"second object":       `{"model":"m","max_tokens":5,"messages":[]}{"model":"claude-opus-4-1"}`,
	}
	var script strings.Builder
	script.WriteString(rawReq)
	for name, b := range bodies {
		script.WriteString("echo '" + name + ":' $(req POST /v1/messages '" + b + "')\n")
	}
	r := env.Run(t, hostile.Turn{Chat: "proxy-ambiguous", Steps: []hostile.Step{hostile.Bash(script.String())}})
	r.RequireOK(t)
	require.True(t, r.Steps[0].Ran)
	out := r.Steps[0].Output
	t.Logf("what the agent saw:\n%s", out)
	for name := range bodies {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, name+":") {
				line = l
			}
		}
		require.NotEmpty(t, line, "attempt %q ran", name)
		assert.Contains(t, line, "HTTP/1.1 400", name)
		assert.Contains(t, line, `"type":"invalid_request_error"`, name)
	}
	// The upstream saw the CLI's own calls only (whose conversation quotes
	// the agent's script), never one of the agent's bodies.
	for _, req := range env.API.MessageRequests() {
		assert.NotEmpty(t, req.Body.System, "a body without the CLI's system prompt reached the upstream: %.300s", req.Raw)
		assert.Equal(t, hostile.Model, req.Body.Model)
		assert.LessOrEqual(t, req.Body.MaxTokens, 32000)
	}
}
