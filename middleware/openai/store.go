package openai

import (
	"container/list"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of the response store (Options.ResponseTTL,
// MaxResponsesPerUser, MaxResponseBytes).
const (
	DefaultResponseTTL         = 24 * time.Hour
	DefaultMaxResponsesPerUser = 256
	DefaultMaxResponseBytes    = 64 << 20
)

// storedResponse is a response created with "store": true: what GET
// /v1/responses/{id} answers and what a later request continues with
// previous_response_id.
type storedResponse struct {
	id, user, chat string
	// history is the conversation the response answered, without its
	// instructions (a later turn sends its own, as OpenAI's API has it);
	// answer is its text. A later turn's messages are history, answer,
	// then its own input.
	history []executor.Message
	answer  string
	// body is the response object as GET answers it.
	body    []byte
	created time.Time
	// size is what the record adds to the store; the caller sets it to
	// the bytes of the turn's own input, put adds the rest. The strings of
	// a chain's earlier turns are shared with the records before it.
	size int64
	elem *list.Element
}

// responseStore keeps the stored responses in memory, per user, bounded in
// count per user and in bytes in all, each for a time: the oldest go
// first. A gateway's restart empties it; a client then gets 404 for
// previous_response_id and can send the whole conversation instead (the
// chat's agent session, kept on disk by the middleware, resumes from it).
// It is safe for concurrent use.
type responseStore struct {
	ttl      time.Duration
	perUser  int
	maxBytes int64
	now      func() time.Time

	mu    sync.Mutex
	users map[string]*userResponses
	// order holds every record, oldest first.
	order list.List
	bytes int64
}

// userResponses are one user's records, oldest first in order.
type userResponses struct {
	byID  map[string]*storedResponse
	order []*storedResponse
}

func newResponseStore(o Options) *responseStore {
	return &responseStore{ttl: o.ResponseTTL, perUser: o.MaxResponsesPerUser, maxBytes: o.MaxResponseBytes, now: o.Now,
		users: map[string]*userResponses{}}
}

// put keeps r, dropping what the bounds no longer hold. A record larger
// than the whole store is not kept.
func (st *responseStore) put(r *storedResponse) {
	r.size += int64(len(r.body)+len(r.answer)+32*len(r.history)) + 256
	if r.size > st.maxBytes {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.expire()
	u := st.users[r.user]
	if u == nil {
		u = &userResponses{byID: map[string]*storedResponse{}}
		st.users[r.user] = u
	}
	r.elem = st.order.PushBack(r)
	u.byID[r.id] = r
	u.order = append(u.order, r)
	st.bytes += r.size
	for len(u.order) > st.perUser {
		st.drop(u.order[0])
	}
	for st.bytes > st.maxBytes {
		st.drop(st.order.Front().Value.(*storedResponse))
	}
}

// get returns the user's response id, or nil when it is unknown, expired
// or another user's: the three are one answer.
func (st *responseStore) get(user, id string) *storedResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.expire()
	if u := st.users[user]; u != nil {
		return u.byID[id]
	}
	return nil
}

// expire drops the records older than the ttl. Held: mu.
func (st *responseStore) expire() {
	limit := st.now().Add(-st.ttl)
	for e := st.order.Front(); e != nil; e = st.order.Front() {
		r := e.Value.(*storedResponse)
		if r.created.After(limit) {
			return
		}
		st.drop(r)
	}
}

// drop removes r, the oldest record of its user. Held: mu.
func (st *responseStore) drop(r *storedResponse) {
	st.order.Remove(r.elem)
	st.bytes -= r.size
	u := st.users[r.user]
	delete(u.byID, r.id)
	u.order = u.order[1:]
	if len(u.order) == 0 {
		delete(st.users, r.user)
	}
}
