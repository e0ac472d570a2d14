// Package middleware is the gateway-facing core of agentbox: a Handler that
// streams events and returns a response, and a Middleware that answers
// requests for sandboxed assistants by running an agent CLI in a sandbox and
// passes every other request to the next handler unchanged.
//
// Concurrency: a Middleware is safe for concurrent use by any number of
// requests; per-request state lives in the call.
package middleware
