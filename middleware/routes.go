package middleware

import (
	"context"

	"github.com/agentbox/agentbox/executor"
)

// What a run opens in its sandbox for its agent: the model route, the
// egress proxy and the gateway's tools, opened once the sandbox is placed
// and closed the moment the turn is answered.

// open opens the run's model route and tools in its sandbox.
func (r *run) open(ctx context.Context) error {
	sb := r.sb
	r.environment = r.environmentPrompt(ctx)
	if r.o.models != nil && !r.a.Sandbox.DirectModel {
		ictx := withIdentity(ctx, r.req.UserID, r.req.ChatID)
		var route ModelRoute
		var err error
		if r.warm != nil {
			route, err = r.openWarmRoute(ictx)
		} else {
			route, err = r.o.models.Open(ictx, sb, r.a)
		}
		if err != nil {
			return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox's model route could not open; the gateway's log has the details"))
		}
		r.route = route
	}
	egress, err := r.openEgress(ctx, sb)
	if err != nil {
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox's egress proxy could not open; the gateway's log has the details"))
	}
	r.egress = egress
	if err := r.openTools(sb); err != nil {
		return r.failure(ctx, err, Errorf(KindSandboxStart, err, "the sandbox's tools could not open; the gateway's log has the details"))
	}
	if err := r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxReady}); err != nil {
		return r.failure(ctx, err, nil)
	}
	if r.client != nil {
		if err := r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxConnected, Sandbox: &executor.SandboxInfo{ID: r.client.ID}}); err != nil {
			return r.failure(ctx, err, nil)
		}
	}
	return nil
}

// openTools starts the run's tool session when the gateway serves tools
// (Options.Tools), or takes the one opened for the chat's pre-started CLI.
func (r *run) openTools(sb executor.Sandbox) error {
	if r.o.opts.Tools == nil {
		return nil
	}
	if pre := r.warm.preCLI(); pre != nil && pre.tools != nil {
		take := pre.toolsFor == r.req.UserID+"/"+r.req.ChatID
		if pre.toolsFor == "" {
			// A fresh CLI's session (a pre-warmed client sandbox): this
			// request's chat is the one it serves from now on.
			if err := pre.tools.Bind(r.req.UserID, r.req.ChatID); err != nil {
				r.log.Warn("the pre-started CLI's tool session cannot serve the chat; the turn starts a new CLI", "error", err)
			} else {
				pre.toolsFor, take = r.req.UserID+"/"+r.req.ChatID, true
			}
		}
		if take {
			pre.toolsRelay.set(r.toolEvent)
			r.tools, pre.tools = pre.tools, nil
			return nil
		}
		// Another chat in the same client sandbox: the CLI and its tool
		// session were made for the previous one.
		r.log.Debug("the pre-started CLI was made for another chat; the turn starts a new one")
		pre.discard(r.o.opts.TeardownTimeout)
		r.warm.pre = nil
	}
	s, err := r.openToolSession(sb, r.req.ChatID, r.toolEvent)
	if err != nil {
		return err
	}
	r.tools = s
	return nil
}

// openToolSession opens a tool session on sb for the request's user, the
// chat ("" for one bound later) and the assistant's allowed tools;
// onShellCall hears of the agent's shell tool calls. It returns nil when
// the host serves none of the tools.
func (r *run) openToolSession(sb executor.Sandbox, chat string, onShellCall func(ToolCall)) (ToolSession, error) {
	uid, gid, err := executor.ParseUser(r.a.Sandbox.Spec.User)
	if err != nil {
		return nil, err
	}
	return r.o.opts.Tools.Open(ToolGrant{HostDir: sb.HostDir(), UID: uid, GID: gid, Box: sb, Sandbox: sb.ID(),
		User: r.req.UserID, Chat: chat, Assistant: r.a.ID, AllowedTools: r.a.Sandbox.Run.AllowedTools,
		OnShellCall: onShellCall})
}

// toolEvent streams a gateway tool call that the agent made from its
// shell as a tool use and its result (the agent CLI's stream only shows
// the shell command).
func (r *run) toolEvent(c ToolCall) {
	if !c.Done {
		_ = r.send(executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: c.ID, Name: c.Name, Input: c.Arguments}})
		return
	}
	_ = r.send(executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: c.ID, Content: c.Result, IsError: c.IsError}})
}

// closeRoutes closes the run's tools session and model route.
func (r *run) closeRoutes() {
	if r.tools != nil {
		if err := r.tools.Close(); err != nil {
			r.log.Warn("closing the tools session failed", "error", err)
		}
		r.tools = nil
	}
	if r.egress != nil {
		if err := r.egress.Close(); err != nil {
			r.log.Warn("closing the egress proxy failed", "error", err)
		}
		r.egress = nil
	}
	if r.route != nil {
		if bs, ok := r.route.(budgetStopper); ok {
			r.budgetStop = bs.BudgetStop()
		}
		r.modelBase = r.route.BaseURL()
		if err := r.route.Close(); err != nil {
			r.log.Warn("closing the model route failed", "error", err)
		}
		r.route = nil
	}
}
