// Package middleware is the gateway-facing core of agentbox: a Handler that
// streams a request's events and returns its response, and an Orchestrator
// whose Wrap is the Middleware that answers requests for sandboxed
// assistants by running an agent CLI in a sandbox and passes every other
// request to the next handler unchanged.
//
// A sandboxed request goes through these phases (DESIGN.md "One request,
// end to end"), each timed in Response.Timings:
//
//  1. lease: one run per (user, chat) at a time; a second request waits up
//     to the sandbox's LeaseWait, then fails with KindBusy;
//  2. container start: executor.Executor.Create (workspace directory,
//     container, readiness), then the model route when there is a
//     ModelRouter; an EventSandbox "ready" event follows;
//  3. workspace: the assistant's files (skills, MCP config) are written;
//  4. Create hook: it may replace the conversation or reject the request
//     (KindHookRejected);
//  5. agent: the runner's invocation runs in the sandbox and its stdout is
//     parsed into events as it arrives;
//  6. Next hook: it may replace the response or answer for a failed agent;
//     it is skipped when the client went away or the sandbox timeout
//     passed, since nobody waits for its answer;
//  7. teardown: the model route and the sandbox are closed on a context
//     the caller cannot cancel, bounded by TeardownTimeout, whatever
//     happened before (client gone, hook rejection, timeout); an
//     EventSandbox "closed" event follows while the client listens.
//
// Usage is what the model route metered when there is a ModelRouter (what
// the gateway bills), else the agent CLI's own report; the CLI's figures
// stay in Response.Completion either way.
//
// New refuses, naming the assistant, the option and the backend, an
// assistant whose sandbox asks for what the executor's Capabilities do not
// declare (a process limit on pods, the session policy where sandboxes
// cannot be kept, egress without a relay, ...) or what the model router
// cannot route (ModelRouter.Validate); requests then rely on what was
// declared instead of asking each sandbox.
//
// Failures are *Error values of a Kind (bad request, not found, config,
// busy, unavailable, sandbox start, hook rejected, agent, timeout,
// canceled, internal) that adapters map to their protocol's statuses;
// Error.Retry tells whether sending the request again is safe.
//
// Adapters for wire protocols live in sub-packages (middleware/openai).
// The module's root package agentbox wires a whole stack from a gateway
// directory (agentbox.New, agentbox.CatalogFromConfig), and
// middleware/modelroute is the ModelRouter for sandboxes with the
// in-container helper (a per-run model proxy that keeps the connector's
// key on the host).
//
// Telemetry: the Orchestrator records OpenTelemetry metrics and spans
// through Options.MeterProvider and Options.TracerProvider (the global
// providers when nil). Every metric carries agentbox.assistant.
//
//	agentbox.requests        counter   requests by agentbox.outcome ("ok" or the error kind) and agentbox.phase reached
//	agentbox.refusals        counter   requests refused before an agent ran, by agentbox.reason
//	agentbox.phase.duration  histogram seconds per agentbox.phase (lease, queue, container_start, workspace,
//	                                   create_hook, agent, next_hook, teardown, total)
//	agentbox.tokens          counter   metered tokens by agentbox.kind (input, output, cache_read, cache_creation)
//	agentbox.tool_calls      counter   the agents' tool calls by agentbox.tool
//	agentbox.budget_stops    counter   requests whose model traffic a budget stopped, by agentbox.budget (calls, tokens, wall)
//	agentbox.queue.length    gauge     requests waiting for a run slot
//	agentbox.sandboxes.live  gauge     sandboxes created and not yet removed
//
// Spans: agentbox.request (attributes agentbox.assistant, agentbox.user,
// agentbox.chat; agentbox.outcome, agentbox.phase and agentbox.budget_stop
// when it ends) with a child per phase (agentbox.lease, agentbox.queue,
// agentbox.container_start, agentbox.workspace, agentbox.create_hook,
// agentbox.agent, agentbox.next_hook, agentbox.teardown), per tool call
// (agentbox.tool_call, from tool use to result) and, with modelroute's Router,
// per upstream model call (agentbox.model_call, with the model and the
// HTTP status; no trace context is sent upstream).
//
// Concurrency: an Orchestrator and the Handlers it returns are safe for
// concurrent use by any number of requests; per-request state lives in the
// call. Emit is never called from two goroutines at once. Close may be
// called from any goroutine, more than once.
package middleware
