package agentbox

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/egress"
	"github.com/agentbox/agentbox/services/modelproxy"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
	"github.com/agentbox/agentbox/services/modelproxy/openairesponses"
)

// DefaultSkillsDir is where an assistant's skills are placed, relative to
// the agent's HOME (Sandbox.HomeFiles): Claude Code reads user skills there
// ($CLAUDE_CONFIG_DIR/skills), outside the workspace the agent writes.
const DefaultSkillsDir = ".claude/skills"

// CodexSkillsDir is where a codex assistant's skills are placed, relative
// to HOME: the Codex CLI reads user skills from $HOME/.agents/skills.
const CodexSkillsDir = ".agents/skills"

// skillsDirs are the skills directories of the runners that do not read
// DefaultSkillsDir.
var skillsDirs = map[string]string{config.CommandCodex: CodexSkillsDir}

// ConfigOptions configure CatalogFromConfig.
type ConfigOptions struct {
	// Hooks compiles an assistant's hooks file (config.Assistant.Hooks,
	// src/index.ts or src/index.js). The default is JSHooks(jsapi.Options{}):
	// package jsapi, with the assistant's hook_timeout.
	Hooks func(a *config.Assistant) (hooks.Hooks, error)
	// MCP adapts each MCP server for the container (config.HelperRelay
	// routes it through the in-container helper); nil keeps the servers as
	// declared.
	MCP config.MCPTransform
	// SkillsDir is where skills go, relative to the agent's HOME, for
	// every assistant; when empty each runner's own (DefaultSkillsDir,
	// CodexSkillsDir for codex).
	SkillsDir string
}

// CatalogFromConfig builds the Catalog of a loaded gateway directory:
// each config.Assistant becomes an Assistant whose Sandbox carries the
// container settings, the skills' files, the system prompt, the
// connector's model, host and key, the runner's arguments, the MCP
// configuration and its allowed tools. Every problem is reported at once.
func CatalogFromConfig(g *config.Gateway, o ConfigOptions) (*middleware.StaticCatalog, error) {
	if o.Hooks == nil {
		o.Hooks = JSHooks(jsapi.Options{})
	}
	ids := make([]string, 0, len(g.Assistants))
	for id := range g.Assistants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var list []*middleware.Assistant
	var errs []error
	for _, id := range ids {
		a, err := fromConfig(g.Assistants[id], o)
		if err != nil {
			errs = append(errs, fmt.Errorf("assistant %q: %w", id, err))
			continue
		}
		list = append(list, a)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	return middleware.NewCatalog(list...)
}

// JSHooks compiles an assistant's hooks with package jsapi, once, at load
// (syntax errors then name src/index.ts:line:col). A zero opts.Timeout
// takes the assistant's hook_timeout.
func JSHooks(opts jsapi.Options) func(a *config.Assistant) (hooks.Hooks, error) {
	return func(a *config.Assistant) (hooks.Hooks, error) {
		o := opts
		if o.Timeout == 0 && a.Sandbox != nil {
			o.Timeout = a.Sandbox.HookTimeout
		}
		return jsapi.Load(a.Dir, o)
	}
}

func fromConfig(ca *config.Assistant, o ConfigOptions) (*middleware.Assistant, error) {
	a := &middleware.Assistant{ID: ca.ID, Name: ca.Name}
	var errs []error
	if ca.Hooks != "" {
		h, err := o.Hooks(ca)
		if err != nil {
			errs = append(errs, fmt.Errorf("hooks: %w", err))
		}
		a.Hooks = h
	}
	if ca.Sandbox == nil {
		return a, errors.Join(errs...)
	}
	sb := ca.Sandbox
	s := &middleware.Sandbox{
		Runner:       sb.Command,
		Spec:         sb.Spec(),
		StallTimeout: sb.StallTimeout,
		// The summary itself comes from the executor's snapshot.
		OmitEnvironment: sb.OmitEnvironmentPrompt,
		Budget:          modelproxy.Budget{MaxRequests: sb.Budget.Calls, MaxTokens: sb.Budget.Tokens, MaxDuration: sb.Budget.Wall},
		Checkpoints: middleware.Checkpoints{Off: sb.Checkpoints.Off,
			Bounds: executor.CheckpointBounds{Count: sb.Checkpoints.Max, Bytes: sb.Checkpoints.MaxBytes}},
		Run: executor.RunRequest{
			SystemPrompt: ca.SystemPrompt(),
			Arguments:    sb.Arguments,
			AllowedTools: ca.MCPAllowedTools(),
		},
	}
	if c := ca.Connector; c != nil {
		s.Run.Model = c.Model
		s.Connector = middleware.Connector{Upstream: c.Host, Key: c.Key.Reveal()}
		if sb.Command == config.CommandCodex {
			t, err := codexTranslate(c)
			if err != nil {
				errs = append(errs, err)
			}
			s.Connector.Translate = t
		}
		if c.Type == config.ConnectorOpenAI && sb.Command == config.CommandClaude {
			s.Connector.Translate = TranslateOpenAI(anthropicopenai.Options{ReasoningField: c.OpenAI.ReasoningField, ThinkingParam: c.OpenAI.Thinking,
				StreamUsage: c.OpenAI.StreamUsage, MaxTokensCeiling: c.OpenAI.MaxTokens, MaxCompletionTokens: c.OpenAI.MaxCompletionTokens})
		}
		// Cursor's CLI talks to Cursor itself (see package cursor).
		s.DirectModel = c.Type == config.ConnectorCursor
	}
	pol, err := EgressPolicy(sb.Egress)
	if err != nil {
		errs = append(errs, fmt.Errorf("sandbox.egress: %w", err))
	}
	s.Egress = pol
	if pol.Intercepts() {
		// The proxy terminates TLS for hosts with a credential; the
		// agent's tools trust the gateway's CA (see stack.go).
		s.Spec.Env = append(s.Spec.Env, egress.CAEnv(cmp.Or(s.Home, middleware.DefaultHome))...)
	}
	dir := o.SkillsDir
	if dir == "" {
		dir = cmp.Or(skillsDirs[sb.Command], DefaultSkillsDir)
	}
	files, err := ca.SkillFiles(dir)
	if err != nil {
		errs = append(errs, err)
	}
	if len(files) > 0 {
		s.HomeFiles = files
	}
	if s.Run.MCPConfig, err = ca.MCPConfig(o.MCP); err != nil {
		errs = append(errs, fmt.Errorf("mcp: %w", err))
	}
	if sb.Policy == config.PolicySession {
		s.Spec.IdleTTL = sb.IdleTTL
	}
	a.Sandbox = s
	return a, errors.Join(errs...)
}

// codexTranslate is the transport of a codex assistant's connector: none
// for an openai connector that serves the Responses API (the CLI's calls
// pass through), a translation to Chat Completions for another openai
// connector and to the Messages API for an anthropic one.
func codexTranslate(c *config.Connector) (func(middleware.Connector, string, http.RoundTripper, hclog.Logger) (http.RoundTripper, error), error) {
	switch {
	case c.Type == config.ConnectorOpenAI && c.OpenAI.API == config.OpenAIAPIResponses:
		return nil, nil
	case c.Type == config.ConnectorOpenAI:
		o := openairesponses.ChatOptions{ReasoningField: c.OpenAI.ReasoningField, ThinkingParam: c.OpenAI.Thinking,
			StreamUsage: c.OpenAI.StreamUsage, MaxTokensCeiling: c.OpenAI.MaxTokens, MaxCompletionTokens: c.OpenAI.MaxCompletionTokens}
		return func(mc middleware.Connector, model string, base http.RoundTripper, log hclog.Logger) (http.RoundTripper, error) {
			o := o
			o.BaseURL, o.APIKey, o.Model, o.Client, o.Logger = mc.Upstream, mc.Key, model, base, log.Named("responses-chat")
			return openairesponses.NewChat(o)
		}, nil
	case c.Type == config.ConnectorAnthropic:
		return func(mc middleware.Connector, model string, base http.RoundTripper, log hclog.Logger) (http.RoundTripper, error) {
			return openairesponses.NewMessages(openairesponses.MessagesOptions{BaseURL: mc.Upstream, APIKey: mc.Key, Model: model,
				Client: base, Logger: log.Named("responses-messages")})
		}, nil
	}
	return nil, fmt.Errorf("connector %q of type %q: the codex runner uses an openai or anthropic connector", c.ID, c.Type)
}

// TranslateOpenAI is a Connector.Translate for OpenAI-compatible Chat
// Completions APIs: o says what differs between providers; the rest comes
// from the connector and the run.
func TranslateOpenAI(o anthropicopenai.Options) func(middleware.Connector, string, http.RoundTripper, hclog.Logger) (http.RoundTripper, error) {
	return func(c middleware.Connector, model string, base http.RoundTripper, log hclog.Logger) (http.RoundTripper, error) {
		o := o
		o.BaseURL, o.APIKey, o.Model, o.Client, o.Logger = c.Upstream, c.Key, model, base, log.Named("openai")
		return anthropicopenai.New(o)
	}
}
