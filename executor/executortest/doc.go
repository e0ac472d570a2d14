// Package executortest provides test doubles and a conformance suite for
// the executor seam.
//
// FakeSandbox is a scriptable executor.Sandbox backed by a real
// executor.Workspace on a temporary directory, so file semantics (escapes,
// caps, atomic writes) are the real ones; Exec calls are recorded and
// answered by its ExecFunc. FakeSandbox.HostExec is a ready ExecFunc that
// runs the argv on the host with os/exec in the workspace directory, for
// tests that need a real shell. FakeExecutor creates FakeSandboxes over
// per-chat workspaces and enforces one lease per chat like a real backend;
// it declares FakeCapabilities, or another backend's (FakeExecutor.Caps).
//
// RunConformance is the behaviour every executor.Executor must show (what
// its Capabilities declare included); each backend runs it against
// itself, and FakeExecutor runs it in this package's tests (with
// HostExec). RunSpecTable holds a backend's plan to executor's table of
// defaults and bounds.
//
// Concurrency: FakeSandbox and FakeExecutor are safe for concurrent use.
// Set their exported fields before handing them to the code under test.
package executortest
