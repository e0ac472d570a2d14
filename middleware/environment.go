package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// ErrNoEnvironment is what Orchestrator.Environment returns when it cannot
// tell: the executor takes no snapshots (Capabilities.Environment) or the
// assistant has no sandbox.
var ErrNoEnvironment = errors.New("middleware: no environment snapshot")

// EnvironmentSource reports what an assistant's agent finds in its
// sandbox; the Orchestrator is one (for GET /v1/models/{id}).
type EnvironmentSource interface {
	Environment(ctx context.Context, a *Assistant) (executor.Environment, error)
}

var _ EnvironmentSource = (*Orchestrator)(nil)

// prefetchTimeout bounds the snapshots New starts for every assistant.
const prefetchTimeout = 2 * time.Minute

// Environment returns the snapshot of what a's agent finds in its sandbox
// (executor.Environment): the image's OS and tools and the limits of a's
// spec, captured once per image content and options by the executor.
func (o *Orchestrator) Environment(ctx context.Context, a *Assistant) (executor.Environment, error) {
	if o.prober == nil || a == nil || a.Sandbox == nil {
		return executor.Environment{}, ErrNoEnvironment
	}
	return o.prober.Environment(ctx, sessionSpec(a.Sandbox.Spec))
}

// environmentPrompt is the summary a run appends to its agent's system
// prompt, or "" when the assistant leaves it out or there is none. A
// failed snapshot costs the run its summary, not its answer (the executor
// logs why).
func (r *run) environmentPrompt(ctx context.Context) string {
	if r.a.Sandbox.OmitEnvironment {
		return ""
	}
	env, err := r.o.Environment(ctx, r.a)
	if err != nil {
		if !errors.Is(err, ErrNoEnvironment) {
			r.log.Debug("no environment summary for this run", "error", err)
		}
		return ""
	}
	return env.Summary()
}

// withEnvironment appends the summary to a system prompt.
func withEnvironment(system, summary string) string {
	switch {
	case summary == "":
		return system
	case strings.TrimSpace(system) == "":
		return summary
	}
	return strings.TrimRight(system, "\n") + "\n\n" + summary
}

// prefetchEnvironments takes the snapshots of every sandboxed assistant in
// the background, so that first requests do not wait for them, and logs
// each summary once. Close cancels it.
func (o *Orchestrator) prefetchEnvironments(ctx context.Context) {
	if o.prober == nil {
		return
	}
	list, err := o.opts.Catalog.List(ctx)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, prefetchTimeout)
	o.bg.add()
	go func() {
		defer o.bg.done()
		defer cancel()
		seen := map[string]bool{}
		for _, a := range list {
			if a.Sandbox == nil {
				continue
			}
			env, err := o.Environment(ctx, a)
			if err != nil {
				o.log.Warn("no environment snapshot for the assistant; its agents run without the summary", "assistant", a.ID, "error", err)
				continue
			}
			if s := env.Summary(); !seen[s] {
				seen[s] = true
				o.log.Info("sandbox environment", "assistant", a.ID, "image", env.Image, "summary", fmt.Sprintf("%q", s))
			}
		}
	}()
}
