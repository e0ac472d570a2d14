// Package executor defines the sandbox seam of agentbox: the Executor that
// creates a Sandbox per request over a chat's persistent workspace, the
// os/exec-shaped command types, the host-side workspace file API, the edit
// engine, the Runner interface that the claude and cursor packages implement,
// and the event vocabulary every runner emits. A Spec's defaults and bounds
// are one table (defaults.go) applied by Normalize, which every backend's
// plan starts with; what a backend can honour it declares in Capabilities.
//
// The package imports only the standard library, so that everything above it
// builds and tests without Docker. Backends live in sub-packages
// (executor/docker is the only importer of the Docker SDK).
//
// Concurrency: an Executor is safe for concurrent use. A Sandbox is safe for
// concurrent use by the goroutines of the one request that holds it; Close
// may be called from any goroutine and more than once. Values of the plain
// types (Cmd, ExecResult, Event, Completion) are not synchronised.
package executor
