package modelroute

import (
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/modelproxy"
)

// runnerAPIs is the model API each runner's CLI speaks, where it is not
// Anthropic's Messages API: the route serves that API to the sandbox (the
// connector's transport translates when the upstream speaks another).
var runnerAPIs = map[string]modelproxy.API{
	"codex": modelproxy.APIResponses,
}

// apiOf is the model API the route of a's runner serves.
func apiOf(a *middleware.Assistant) modelproxy.API {
	if api, ok := runnerAPIs[a.Sandbox.Runner]; ok {
		return api
	}
	return modelproxy.APIMessages
}
