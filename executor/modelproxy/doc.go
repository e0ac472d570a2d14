// Package modelproxy is the host side of a sandbox's model traffic: an HTTP
// reverse proxy served on the per-sandbox unix socket {hostDir}/model.sock,
// which the in-container helper relays the agent CLI's loopback connections
// to.
//
// The container only ever holds a per-request token (its ANTHROPIC_API_KEY);
// the proxy accepts that token alone (x-api-key or Authorization: Bearer,
// compared in constant time), swaps in the connector's real key, forwards to
// the connector's host without retrying, streams the answer back (SSE is
// flushed per chunk as it arrives), caps the request size, enforces the
// request's budget (model calls, tokens, wall time) and meters every inner
// call's usage from the Messages API response as it streams past, without
// buffering the stream. Refusals use Anthropic's error JSON shape so the CLI
// reports them clearly. Keys and tokens are never logged.
//
// Concurrency: a Proxy is safe for concurrent use; Usage and Calls may be
// read while requests are in flight (they reflect finished calls). Close
// may be called from any goroutine and more than once.
package modelproxy
