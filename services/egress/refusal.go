package egress

import (
	"errors"
	"fmt"
)

// Reason says why the proxy refused an egress attempt. The set is fixed
// (Reasons), so a metric can carry it as an attribute; the log line says
// more (the host, the parser's words).
type Reason string

// The reasons of refusals.
const (
	// ReasonNotAllowed: the host:port is not on the allowlist (or is an IP
	// literal, or not a DNS name).
	ReasonNotAllowed Reason = "not_allowed"
	// ReasonPrivateAddress: the name resolved only to private, loopback,
	// link-local or reserved addresses.
	ReasonPrivateAddress Reason = "private_address"
	// ReasonUnresolvable: the name did not resolve (answered 502).
	ReasonUnresolvable Reason = "unresolvable"
	// ReasonPlainCredential: plain http:// to a host whose rule carries
	// a credential, which the proxy sends only over TLS.
	ReasonPlainCredential Reason = "plain_http_credential"
	// ReasonNotProxy: not a proxy request (origin-form, another scheme,
	// CONNECT or PRI inside an intercepted tunnel).
	ReasonNotProxy Reason = "not_proxy_request"
	// ReasonCapped: a byte, connection or concurrency cap (answered 503).
	ReasonCapped Reason = "capped"
	// ReasonTooManyClients: more client connections open at once than
	// the proxy reads (4×MaxConcurrent).
	ReasonTooManyClients Reason = "too_many_connections"
	// ReasonMalformed: the request does not parse (net/http's 400, a
	// target with userinfo).
	ReasonMalformed Reason = "malformed"
	// ReasonHeaderTooLarge: the request head passed MaxHeaderBytes (431).
	ReasonHeaderTooLarge Reason = "header_too_large"
	// ReasonUnsupported: a transfer coding, protocol version or
	// expectation the proxy does not speak (501, 505, 417).
	ReasonUnsupported Reason = "unsupported"
	// ReasonTimeout: no complete request head within HeaderTimeout.
	ReasonTimeout Reason = "timeout"
	// ReasonIncomplete: the client hung up inside a request head.
	ReasonIncomplete Reason = "incomplete"
)

// Reasons lists every Reason, for a metric's documentation and tests.
var Reasons = []Reason{ReasonNotAllowed, ReasonPrivateAddress, ReasonUnresolvable, ReasonPlainCredential, ReasonNotProxy,
	ReasonCapped, ReasonTooManyClients, ReasonMalformed, ReasonHeaderTooLarge, ReasonUnsupported, ReasonTimeout, ReasonIncomplete}

// refusal is an error with its Reason.
type refusal struct {
	reason Reason
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refusedFor is a refusal (wrapping ErrRefused, answered 403) for reason.
func refusedFor(reason Reason, format string, args ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)}
}

// reasonOf classifies an error the handler refuses with: its own Reason,
// else capped for ErrCapped, else not_allowed (Policy.Check's refusals).
func reasonOf(err error) Reason {
	var r *refusal
	switch {
	case errors.As(err, &r):
		return r.reason
	case errors.Is(err, ErrCapped):
		return ReasonCapped
	}
	return ReasonNotAllowed
}
