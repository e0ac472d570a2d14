package hostile

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/middleware/openai"
)

// Defaults of the harness.
const (
	// DefaultAssistant is the id of the assistant New creates when
	// Options.Assistants is empty.
	DefaultAssistant = "attacker"
	// DefaultUser and DefaultChat are a Turn's user and chat when it names
	// none.
	DefaultUser = "mallory"
	DefaultChat = "1"
	// DefaultSkill is the skill every assistant starts with (in its
	// HomeFiles, as CatalogFromConfig places skills), so a test can check
	// that skills still load.
	DefaultSkill = "hostile-probe"
	// ConnectorKey is the connector's "real" key: only the host's model
	// proxy holds it; the scripted server sees it on every forwarded call.
	ConnectorKey = "sk-ant-hostile-connector-0123456789abcdef"
	// Model is the connector's model.
	Model = "claude-sonnet-4-6"
	// DefaultAnswer is the model's final text of a turn that sets none.
	DefaultAnswer = "hostile turn finished"
)

// DefaultSkillFile is DefaultSkill's SKILL.md, by name relative to the
// agent's HOME (Sandbox.HomeFiles, as package config's skills are placed).
var DefaultSkillFile = ".claude/skills/" + DefaultSkill + "/SKILL.md"

// Options configure an Env. The zero value runs one assistant,
// DefaultAssistant.
type Options struct {
	// Assistants are the assistants of the gateway, in catalog order; the
	// first is a Turn's default. Empty means one DefaultAssistant.
	Assistants []Assistant
	// Executor adjusts executor/docker's options after the harness set
	// DataDir, Image, HelperBinary and Logger.
	Executor func(*docker.Options)
	// Proxy adjusts the model route's options.
	Proxy func(*modelroute.Options)
	// Orchestrator adjusts the middleware's options after the harness set
	// Catalog, NewExecutor, Runners and NewModelRouter.
	Orchestrator func(*middleware.Options)
	// Runner adds options to the claude runner.
	Runner []claude.Option
	// Script answers model requests that carry no turn marker (a request
	// from something the attacker started on its own); nil answers them
	// with a short text.
	Script scriptedapi.Script
}

// Assistant is one assistant of the harness's gateway.
type Assistant struct {
	// ID is the assistant's id (DefaultAssistant when empty).
	ID string
	// Configure adjusts the assistant after the harness filled in its
	// defaults (see New); it may change anything, e.g.
	// a.Sandbox.Run.Arguments["disallowed_tools"] = []string{"Bash"}.
	Configure func(a *middleware.Assistant)
}

// Env is a running stack. Build one with New; it is torn down when the
// test ends.
type Env struct {
	// API is the scripted model server (the connector's upstream).
	API *scriptedapi.Server
	// DataDir is the executor's data directory on the host.
	DataDir string
	// URL is the OpenAI adapter's base URL (".../v1/").
	URL string
	// Client is a real OpenAI client on URL.
	Client sdk.Client
	// Assistants are the gateway's assistants by id, as configured.
	Assistants map[string]*middleware.Assistant

	first  string
	log    *testenv.SyncBuffer
	fallbk scriptedapi.Script
	seq    atomic.Int64
	mu     sync.Mutex
	turns  map[int64]*turnState
}

// New starts the stack for t: scripted server, executor, orchestrator,
// adapter. Each assistant starts as: runner claude, the sandbox image, a
// 3-minute timeout, 1 GiB, 1 CPU, 256 pids, network none, a 2-minute lease
// wait, a 1-minute stall timeout, model Model, permission_mode
// acceptEdits, max_turns 40, DefaultSkill in HomeFiles, the scripted server as
// connector with ConnectorKey; then Assistant.Configure runs.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	e := &Env{DataDir: t.TempDir(), log: &testenv.SyncBuffer{}, fallbk: o.Script,
		turns: map[int64]*turnState{}, Assistants: map[string]*middleware.Assistant{}}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Debug, Output: e.log})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", e.log.String())
		}
	})
	e.API = scriptedapi.Start(scriptedapi.WithScript(e.script))
	t.Cleanup(e.API.Close)

	specs := o.Assistants
	if len(specs) == 0 {
		specs = []Assistant{{}}
	}
	var list []*middleware.Assistant
	for _, s := range specs {
		a := e.defaultAssistant(s.ID, img)
		if s.Configure != nil {
			s.Configure(a)
		}
		list = append(list, a)
		e.Assistants[a.ID] = a
	}
	e.first = list[0].ID
	cat, err := middleware.NewCatalog(list...)
	if err != nil {
		t.Fatalf("hostile: %v", err)
	}
	proxy := modelroute.Options{Logger: logger.Named("proxy")}
	if o.Proxy != nil {
		o.Proxy(&proxy)
	}
	mo := middleware.Options{
		Catalog: cat,
		NewExecutor: func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			do := docker.Options{DataDir: e.DataDir, Image: img, HelperBinary: bin, Logger: log,
				ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond}
			if o.Executor != nil {
				o.Executor(&do)
			}
			return docker.New(ctx, do)
		},
		Runners: []executor.Runner{claude.New(append([]claude.Option{claude.WithLogger(logger.Named("claude"))}, o.Runner...)...)},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(proxy), nil
		},
		Logger:          logger,
		TeardownTimeout: 30 * time.Second,
	}
	if o.Orchestrator != nil {
		o.Orchestrator(&mo)
	}
	orch, err := middleware.New(context.Background(), mo)
	if err != nil {
		t.Fatalf("hostile: starting the middleware: %v", err)
	}
	t.Cleanup(func() {
		if err := orch.Close(); err != nil {
			t.Errorf("hostile: closing the middleware: %v", err)
		}
	})
	srv, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, e.capture, orch.Wrap), Catalog: cat})
	if err != nil {
		t.Fatalf("hostile: starting the adapter: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e.URL = hs.URL + "/v1/"
	e.Client = sdk.NewClient(option.WithBaseURL(e.URL), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return e
}

// defaultAssistant is an assistant with the harness's defaults.
func (e *Env) defaultAssistant(id, img string) *middleware.Assistant {
	if id == "" {
		id = DefaultAssistant
	}
	return &middleware.Assistant{ID: id, Sandbox: &middleware.Sandbox{
		Runner: "claude",
		Spec: executor.Spec{Image: img, Timeout: 3 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 2 * time.Minute},
		HomeFiles: map[string][]byte{DefaultSkillFile: []byte("---\nname: " + DefaultSkill +
			"\ndescription: Answers with the word probe.\n---\n\nAnswer with the word probe.\n")},
		Run:          executor.RunRequest{Model: Model, Arguments: map[string]any{"permission_mode": "acceptEdits", "max_turns": 40}},
		StallTimeout: time.Minute,
		Connector:    middleware.Connector{Upstream: e.API.URL, Key: ConnectorKey},
	}}
}

// Log is the gateway's log so far (all levels).
func (e *Env) Log() string { return e.log.String() }

// Workspace is the host path of a chat's workspace (it exists once a turn
// of the chat started its sandbox); "" for invalid ids.
func (e *Env) Workspace(user, chat string) string {
	dir, err := executor.WorkspaceDir(e.DataDir, user, chat)
	if err != nil {
		return ""
	}
	return dir
}

// Step is one tool call of the attacker's model.
type Step struct {
	// Tool is the tool's name ("Bash", "Write", "Skill", ...).
	Tool string
	// Input is the tool's input, marshalled to JSON.
	Input any
}

// Bash is a step that runs command with the Bash tool.
func Bash(command string) Step {
	return Step{Tool: "Bash", Input: map[string]string{"command": command, "description": "hostile step"}}
}

// Call is a step that calls any tool.
func Call(tool string, input any) Step { return Step{Tool: tool, Input: input} }

// Turn is one chat request whose model runs Steps, in order, and then
// answers Answer.
type Turn struct {
	// Assistant answers the turn (the first of Options.Assistants when
	// empty).
	Assistant string
	// User and Chat select the workspace (DefaultUser, DefaultChat when
	// empty).
	User, Chat string
	// Steps are the tool calls, one per model response.
	Steps []Step
	// Answer is the final text (DefaultAnswer when empty).
	Answer string
	// Prompt is put before the turn's marker in the user message.
	Prompt string
	// Timeout bounds the request (5 minutes when 0).
	Timeout time.Duration
}

// StepResult is what one step did, as the model saw it.
type StepResult struct {
	Step Step
	// Ran reports that the CLI answered the call with a tool result.
	Ran bool
	// Output is the tool result's text (for Bash: what the command printed,
	// stdout and stderr, as the CLI hands it to the model).
	Output string
	// IsError is the tool result's error flag (a failed command, a refused
	// or unknown tool).
	IsError bool
}

// Result is one turn's outcome.
type Result struct {
	Turn   Turn
	Marker string
	// Steps has one entry per Turn.Steps, in order.
	Steps []StepResult
	// Content is the completion's text as the OpenAI client got it.
	Content string
	// Err is the client's error (wrapping an *openai.Error for an HTTP
	// error, with the API's message in its text) or
	// nil; Status its HTTP status.
	Err    error
	Status int
	// Kind and MiddlewareErr are the middleware's own error, when it
	// failed.
	Kind          middleware.Kind
	MiddlewareErr error
	// Response is the middleware's response when it succeeded.
	Response *middleware.Response
	// Events are the run's events in order; Init is the CLI's system/init
	// (tools, skills, MCP servers), nil when the CLI never started.
	Events []executor.Event
	Init   *executor.InitInfo
	// Requests are the requests the scripted server received while the
	// turn ran, in arrival order.
	Requests []*scriptedapi.Request
	// Workspace is the chat's workspace on the host.
	Workspace string
}

// OK reports that the turn answered without an error.
func (r *Result) OK() bool { return r.Err == nil }

// RequireOK fails t when the turn failed.
func (r *Result) RequireOK(t testing.TB) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("hostile %s failed: status %d, kind %q: %v (middleware: %v)", r.Marker, r.Status, r.Kind, r.Err, r.MiddlewareErr)
	}
}

// Output joins every step's output, in order, one per line.
func (r *Result) Output() string {
	var sb strings.Builder
	for _, s := range r.Steps {
		sb.WriteString(s.Output)
		sb.WriteString("\n")
	}
	return sb.String()
}

// turnState is what the script and the capture need of a running turn.
type turnState struct {
	turn Turn

	mu     sync.Mutex
	events []executor.Event
	resp   *middleware.Response
	err    error
}

var markerRe = regexp.MustCompile(`\[hostile-turn (\d+)\]`)

// Run runs one turn and returns its result. A turn that fails (the
// request errs) is a Result with Err set, not a test failure: attacks
// often aim at failures.
func (e *Env) Run(t testing.TB, turn Turn) *Result {
	t.Helper()
	if turn.Assistant == "" {
		turn.Assistant = e.first
	}
	if turn.User == "" {
		turn.User = DefaultUser
	}
	if turn.Chat == "" {
		turn.Chat = DefaultChat
	}
	if turn.Answer == "" {
		turn.Answer = DefaultAnswer
	}
	if turn.Timeout == 0 {
		turn.Timeout = 5 * time.Minute
	}
	n := e.seq.Add(1)
	st := &turnState{turn: turn}
	e.mu.Lock()
	e.turns[n] = st
	e.mu.Unlock()
	marker := fmt.Sprintf("[hostile-turn %d]", n)
	res := &Result{Turn: turn, Marker: marker, Workspace: e.Workspace(turn.User, turn.Chat)}

	before := len(e.API.Requests())
	ctx, cancel := context.WithTimeout(context.Background(), turn.Timeout)
	defer cancel()
	prompt := strings.TrimSpace(turn.Prompt + " " + marker)
	comp, err := e.Client.Chat.Completions.New(ctx, sdk.ChatCompletionNewParams{
		Model: turn.Assistant, User: sdk.String(turn.User + ":" + turn.Chat),
		Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(prompt)},
	})
	res.Err = err
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		res.Status = apiErr.StatusCode
		// openai-go v3's Error() is the status alone; the client's
		// message is what the attacks assert on.
		res.Err = fmt.Errorf("%w: %s", err, apiErr.Message)
	}
	if err == nil && len(comp.Choices) > 0 {
		res.Content = comp.Choices[0].Message.Content
	}
	res.Requests = e.API.Requests()[before:]

	st.mu.Lock()
	res.Events = st.events
	res.Response = st.resp
	res.MiddlewareErr = st.err
	st.mu.Unlock()
	res.Kind = middleware.KindOf(res.MiddlewareErr)
	for _, ev := range res.Events {
		if ev.Kind == executor.EventInit && ev.Init != nil {
			res.Init = ev.Init
		}
	}
	res.Steps = stepResults(turn.Steps, res.Requests, marker)
	t.Logf("hostile %s (%s, %s:%s): status %d, kind %q, %d steps ran, %d model requests",
		marker, turn.Assistant, turn.User, turn.Chat, res.Status, res.Kind, countRan(res.Steps), len(res.Requests))
	return res
}

func countRan(steps []StepResult) int {
	n := 0
	for _, s := range steps {
		if s.Ran {
			n++
		}
	}
	return n
}

// turnOf finds the turn a conversation belongs to: the last marker in the
// first user message (the CLI may add blocks before the prompt).
func (e *Env) turnOf(text string) (*turnState, string) {
	m := markerRe.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return nil, ""
	}
	n, err := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	if err != nil {
		return nil, ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.turns[n], m[len(m)-1][0]
}

// firstUserText is the text of the conversation's first user message.
func firstUserText(msgs []scriptedapi.Message) string {
	for _, m := range msgs {
		if m.Role == "user" {
			return m.Content.Text()
		}
	}
	return ""
}

// script is the scripted server's model: step k of the turn when the
// conversation holds k tool calls, then the turn's answer.
func (e *Env) script(req *scriptedapi.Request) scriptedapi.Turn {
	st, _ := e.turnOf(firstUserText(req.Body.Messages))
	if st == nil {
		if e.fallbk != nil {
			return e.fallbk(req)
		}
		return scriptedapi.Say("hostile: this request carries no turn marker")
	}
	k := len(toolCalls(req.Body.Messages))
	if k < len(st.turn.Steps) {
		s := st.turn.Steps[k]
		return scriptedapi.Call(s.Tool, s.Input)
	}
	return scriptedapi.Say(st.turn.Answer)
}

// capture is a middleware that records each turn's events and outcome.
func (e *Env) capture(next middleware.Handler) middleware.Handler {
	return middleware.HandlerFunc(func(ctx context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		var st *turnState
		if len(req.Messages) > 0 {
			st, _ = e.turnOf(req.Messages[len(req.Messages)-1].Content)
		}
		if st == nil {
			return next.Handle(ctx, req, emit)
		}
		resp, err := next.Handle(ctx, req, func(ev executor.Event) error {
			st.mu.Lock()
			st.events = append(st.events, ev)
			st.mu.Unlock()
			return emit(ev)
		})
		st.mu.Lock()
		st.resp, st.err = resp, err
		st.mu.Unlock()
		return resp, err
	})
}

// toolCall is a tool_use of the conversation with its result, if any.
type toolCall struct {
	id       string
	answered bool
	result   string
	isError  bool
}

// toolCalls lists the conversation's tool calls in order with their
// results.
func toolCalls(msgs []scriptedapi.Message) []*toolCall {
	var out []*toolCall
	byID := map[string]*toolCall{}
	for _, m := range msgs {
		for _, b := range m.Content {
			switch {
			case m.Role == "assistant" && b.Type == "tool_use":
				c := &toolCall{id: b.ID}
				out = append(out, c)
				byID[b.ID] = c
			case m.Role == "user" && b.Type == "tool_result":
				if c := byID[b.ToolUseID]; c != nil {
					c.answered, c.result, c.isError = true, b.Content.Text(), b.IsError
				}
			}
		}
	}
	return out
}

// stepResults reads the steps' outcomes from the turn's latest model
// request that carries its marker (each request holds the whole
// conversation so far).
func stepResults(steps []Step, reqs []*scriptedapi.Request, marker string) []StepResult {
	out := make([]StepResult, len(steps))
	for i, s := range steps {
		out[i].Step = s
	}
	var calls []*toolCall
	for _, r := range reqs {
		if r.Path != "/v1/messages" || !strings.Contains(firstUserText(r.Body.Messages), marker) {
			continue
		}
		if c := toolCalls(r.Body.Messages); len(c) >= len(calls) {
			calls = c
		}
	}
	for i := 0; i < len(calls) && i < len(out); i++ {
		out[i].Ran, out[i].Output, out[i].IsError = calls[i].answered, calls[i].result, calls[i].isError
	}
	return out
}
