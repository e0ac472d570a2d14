package middleware

import "context"

// Context keys are unexported struct types, so no other package can collide
// with them or read them except through the accessors below.
type (
	requestIDKey struct{}
	assistantKey struct{}
	identityKey  struct{}
)

// identity is the user and chat of a sandboxed request.
type identity struct{ user, chat string }

// withIdentity returns ctx carrying the request's user and chat, for the
// ModelRouter's log lines.
func withIdentity(ctx context.Context, user, chat string) context.Context {
	return context.WithValue(ctx, identityKey{}, identity{user, chat})
}

// IdentityFrom returns the user and chat of the sandboxed request ctx
// belongs to ("" when it carries none); a ModelRouter's Open gets such a
// context.
func IdentityFrom(ctx context.Context) (user, chat string) {
	id, _ := ctx.Value(identityKey{}).(identity)
	return id.user, id.chat
}

// WithRequestID returns ctx carrying the request's id (the adapter's
// completion id), which the middleware puts in its log lines.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// withAssistant returns ctx carrying the assistant the middleware looked up,
// for the next handler of a pass-through request.
func withAssistant(ctx context.Context, a *Assistant) context.Context {
	return context.WithValue(ctx, assistantKey{}, a)
}

// AssistantFrom returns the assistant the middleware looked up for a request
// it passed to the next handler (an assistant without a sandbox block), or
// nil when it did not look one up.
func AssistantFrom(ctx context.Context) *Assistant {
	a, _ := ctx.Value(assistantKey{}).(*Assistant)
	return a
}
