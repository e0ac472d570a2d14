package agentbox

import (
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/services/egress"
)

// EgressPolicy converts an assistant's sandbox.egress to the proxy's
// policy; nil when the list is empty.
func EgressPolicy(rules []config.EgressRule) (*egress.Policy, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	out := make([]egress.Rule, len(rules))
	for i, r := range rules {
		out[i] = egress.Rule{Host: r.Host, Port: r.Port, Private: r.Private}
		if s := r.Secret; s != nil {
			out[i].Credential = &egress.Credential{Env: s.Env, Header: s.Header, Prefix: s.Prefix}
		}
	}
	return egress.NewPolicy(out...)
}
