// Package hooks defines the contract of an assistant's Create and Next hooks
// (run before and after the agent) and the policy around them: ordering,
// what a return value means, and which errors fail a request. It knows
// nothing of JavaScript; package jsapi implements it with goja.
//
// Concurrency: a Hooks value is shared by all requests of an assistant and
// must be safe for concurrent use; each invocation gets its own state.
package hooks
