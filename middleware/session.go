package middleware

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Session continuity: each chat keeps its agent CLI's own session
// transcript on the host, in SessionDir/{user}/chat-{chat}/{assistant}/,
// beside the conversation it corresponds to (a hash chain of the client's
// user and assistant messages). Only the transcript persists: HOME, the
// settings and the tools are rebuilt for every run. A request whose
// history is exactly the stored conversation plus one user message resumes
// the session with that message alone. A history that ends with one new
// user message after an earlier answer of the session (the client
// regenerated an answer, or branched after an earlier turn) forks the
// session at that answer (a new session, the stored one left as it was),
// so the turns up to there keep their tool calls and results. Any other
// history (an edited message) starts a new session with the history as
// text, the runner's flattened form; replaying it as real turns is not
// built.

// sessionRunner is what a runner offers for session continuity
// (claude.Runner implements it).
type sessionRunner interface {
	// SessionsEnabled reports whether the assistant's arguments keep the
	// CLI's session between turns.
	SessionsEnabled(req executor.RunRequest) bool
	// TranscriptFile is where the CLI keeps session req.SessionID's
	// transcript, relative to req.Home.
	TranscriptFile(req executor.RunRequest) (string, error)
}

// Limits on a stored session.
const (
	// maxTranscript caps a transcript copied out of the sandbox; a longer
	// one is not kept and the next turn starts a new session.
	maxTranscript = 64 << 20
	// transcriptTimeout bounds the commands that copy a transcript.
	transcriptTimeout = time.Minute
)

// Names in a session directory.
const (
	sessionRecordName = "session.json"
	transcriptName    = "transcript.jsonl"
)

// errBadTranscript marks a transcript that is not what the CLI writes.
var errBadTranscript = errors.New("middleware: the session transcript is not valid")

// sessionRecord is the stored side of a chat's session.
type sessionRecord struct {
	// SessionID is the CLI's session id.
	SessionID string `json:"session_id"`
	// Chain holds, for each user or assistant message of the stored
	// conversation, the hash of the conversation up to and including it.
	Chain []string `json:"chain"`
	// System is the hash of the system prompt the session's CLI was
	// started with (systemHash). Claude Code 2.1.330 keeps a resumed
	// session's system prompt and ignores the one it is started with, so a
	// session is resumed only under the prompt it began with.
	System string `json:"system,omitempty"`
	// Anchors holds, for each element of Chain that is an answer given in
	// this session (or the session it was forked from), the transcript
	// entry ending it: the CLI's uuid of the turn's last assistant
	// message, where a fork at that answer cuts. Other elements are "".
	Anchors []string  `json:"anchors,omitempty"`
	Updated time.Time `json:"updated"`
}

// sessionStore keeps sessions under dir. Requests of one chat are
// serialized by the chat's lease, so it needs no locks; writes are atomic
// (temporary file and rename).
type sessionStore struct{ dir string }

// chatSession is one run's use of the store.
type chatSession struct {
	dir string // the chat's directory for the assistant
	// file is the transcript's name relative to the agent's HOME.
	file string
	id   string
	// resumed: the run continues the stored session, or a fork of it.
	resumed bool
	// anchors are the stored anchors of the conversation the run keeps
	// (the stored one resumed, or the prefix a fork keeps).
	anchors []string
	// conversation are the client's messages of the request.
	conversation []executor.Message
	// system is systemHash of the run's request.
	system string
}

// systemHash hashes what reaches the CLI as its system prompt: the
// assistant's instructions and the system messages of the conversation
// (a Create hook may add or change them).
func systemHash(rr *executor.RunRequest) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%d\x00%s", len(rr.SystemPrompt), rr.SystemPrompt) // a hash never fails
	for _, m := range rr.Messages {
		if m.Role == "system" {
			_, _ = fmt.Fprintf(h, "\x00%d\x00%s", len(m.Content), m.Content)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// conversationChain returns the hash chain of msgs' user and assistant
// messages: element i covers those messages up to the i-th. System
// messages are left out: they reach the CLI as its system prompt on every
// run, not through the transcript.
func conversationChain(msgs []executor.Message) []string {
	var chain []string
	prev := sha256.Sum256(nil)
	for _, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			continue
		}
		h := sha256.New()
		h.Write(prev[:])
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", m.Role, len(m.Content)) // a hash never fails
		h.Write([]byte(m.Content))
		copy(prev[:], h.Sum(nil))
		chain = append(chain, hex.EncodeToString(prev[:]))
	}
	return chain
}

// match reports how msgs relate to the stored conversation under the
// system prompt the session began with: resume when msgs is exactly the
// stored conversation plus one message; else a fork anchor when msgs is
// the stored conversation up to one of its anchored answers plus one new
// user message (a regenerated answer or a branch); else neither. kept is
// how many of the stored messages the run keeps.
func (rec *sessionRecord) match(msgs []executor.Message, system string) (resume bool, anchor string, kept int) {
	chain := conversationChain(msgs)
	j := len(chain) - 2 // the last message the run keeps
	if len(rec.Chain) == 0 || rec.System != system || j < 0 || j >= len(rec.Chain) {
		return false, "", 0
	}
	for i := 0; i <= j; i++ {
		if chain[i] != rec.Chain[i] {
			return false, "", 0
		}
	}
	if j == len(rec.Chain)-1 {
		return true, "", j + 1
	}
	if j < len(rec.Anchors) && rec.Anchors[j] != "" && lastTurnRole(msgs) == "user" {
		return false, rec.Anchors[j], j + 1
	}
	return false, "", 0
}

// lastTurnRole is the role of the last user or assistant message.
func lastTurnRole(msgs []executor.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if r := msgs[i].Role; r == "user" || r == "assistant" {
			return r
		}
	}
	return ""
}

// uuidRE matches the lower-case UUIDs the CLI names entries and sessions by.
var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// chatDir is the directory of one chat's session with one assistant.
func (s *sessionStore) chatDir(user, chat, assistant string) (string, error) {
	if err := executor.ValidateID("assistant", assistant); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, user, "chat-"+chat, assistant), nil
}

// load returns the chat's record and transcript, or nil when there is
// none or it does not hold together (then it is removed).
func (s *sessionStore) load(dir string) (*sessionRecord, []byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, sessionRecordName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var rec sessionRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("%w: %s: %w", errBadTranscript, sessionRecordName, err), os.RemoveAll(dir))
	}
	data, err := os.ReadFile(filepath.Join(dir, transcriptName))
	if err == nil {
		_, err = validTranscript(data, rec.SessionID)
	}
	if err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &rec, data, nil
}

// save stores the transcript and then the record naming it, so that a
// crash in between leaves a record whose id the transcript does not carry,
// which load refuses.
func (s *sessionStore) save(dir string, rec *sessionRecord, transcript []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	rb, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := writeAtomic(dir, transcriptName, transcript); err != nil {
		return err
	}
	return writeAtomic(dir, sessionRecordName, rb)
}

// writeAtomic writes name in dir through a temporary file and a rename.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// validTranscript checks that data is what the CLI writes for session id:
// JSON objects one per line, none naming another session, at least one
// naming this one. The agent can write the file during its run, so it is
// checked before it is kept and again before it is placed. It also
// returns the uuid of the last assistant entry, where a later fork at
// this turn's answer cuts ("" when there is none that is a UUID): the
// same pass, as the transcript grows with every turn of the chat.
func validTranscript(data []byte, id string) (lastAnswer string, err error) {
	if len(data) == 0 || len(data) > maxTranscript {
		return "", fmt.Errorf("%w: %d bytes (at most %d)", errBadTranscript, len(data), maxTranscript)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxTranscript)
	ours := false
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var v struct {
			SessionID *string `json:"sessionId"`
			// Raw: a type or uuid that is not a string only means the
			// line is not an answer's entry.
			Type, UUID json.RawMessage
		}
		if line[0] != '{' || json.Unmarshal(line, &v) != nil {
			return "", fmt.Errorf("%w: line %d is not a JSON object", errBadTranscript, n)
		}
		if v.SessionID != nil {
			if *v.SessionID != id {
				return "", fmt.Errorf("%w: line %d names session %q, not %q", errBadTranscript, n, *v.SessionID, id)
			}
			ours = true
		}
		var typ, uuid string
		if json.Unmarshal(v.Type, &typ) == nil && typ == "assistant" && (v.UUID == nil || json.Unmarshal(v.UUID, &uuid) == nil) {
			lastAnswer = uuid
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%w: %w", errBadTranscript, err)
	}
	if !ours {
		return "", fmt.Errorf("%w: no line names session %q", errBadTranscript, id)
	}
	if !uuidRE.MatchString(lastAnswer) {
		lastAnswer = ""
	}
	return lastAnswer, nil
}

// newSessionID returns a random (version 4) UUID.
func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// openSession chooses the CLI session of the run and sets rr's session
// fields: the stored session resumed when the client's history continues
// it (its transcript placed in the agent's HOME), a new one otherwise.
// It returns nil, leaving rr as it is, when the gateway keeps no sessions
// or the runner or the assistant does not use them. Failures of the store
// cost continuity, never the request: they are logged and the run starts a
// new session.
func (r *run) openSession(ctx context.Context, runner executor.Runner, rr *executor.RunRequest) *chatSession {
	sr, ok := runner.(sessionRunner)
	if r.o.opts.SessionDir == "" || !ok || !sr.SessionsEnabled(*rr) {
		return nil
	}
	store := &sessionStore{dir: r.o.opts.SessionDir}
	dir, err := store.chatDir(r.req.UserID, r.req.ChatID, r.a.ID)
	if err != nil {
		r.log.Warn("no session continuity for this assistant id", "error", err)
		return nil
	}
	cs := &chatSession{dir: dir, conversation: r.req.Messages, system: systemHash(rr)}
	rec, transcript, err := store.load(dir)
	if err != nil {
		r.log.Warn("the chat's stored session was unusable and is dropped; the run starts a new one", "error", err)
	}
	var resume bool
	var anchor string
	var kept int
	if rec != nil {
		resume, anchor, kept = rec.match(r.req.Messages, cs.system)
	}
	if resume || anchor != "" {
		stored := *rr
		stored.SessionID, stored.Resume, stored.ForkFrom, stored.ResumeAt = rec.SessionID, true, "", ""
		var storedFile string
		storedFile, err = sr.TranscriptFile(stored)
		// A kept container's HOME holds the stored transcript already.
		if err == nil && (r.warm == nil || r.warm.homeSession != rec.SessionID) {
			err = executor.PlaceHomeFiles(ctx, r.sb, rr.Home, map[string][]byte{storedFile: transcript})
		}
		if err == nil && resume {
			rr.SessionID, rr.Resume = rec.SessionID, true
			cs.file, cs.id = storedFile, rec.SessionID
		} else if err == nil {
			rr.SessionID, rr.Resume, rr.ForkFrom, rr.ResumeAt = newSessionID(), false, rec.SessionID, anchor
			cs.file, err = sr.TranscriptFile(*rr)
			cs.id = rr.SessionID
		}
		if err == nil {
			cs.resumed = true
			cs.anchors = append(make([]string, 0, kept+2), rec.Anchors[:min(kept, len(rec.Anchors))]...)
			if resume {
				r.log.Debug("resuming the chat's session", "session", cs.id, "messages", kept)
			} else {
				r.log.Debug("forking the chat's session at an earlier answer", "from", rec.SessionID, "session", cs.id, "messages", kept)
			}
			return cs
		}
		rr.ForkFrom, rr.ResumeAt = "", ""
		r.log.Warn("the chat's session could not be placed in the sandbox; the run starts a new one", "error", err)
	} else if rec != nil && rec.System != cs.system {
		r.log.Debug("the system prompt changed since the chat's session began; starting a new one with the history replayed", "session", rec.SessionID)
	} else if rec != nil {
		r.log.Debug("the history does not continue the chat's session; starting a new one", "session", rec.SessionID)
	}
	rr.SessionID, rr.Resume = newSessionID(), false
	if w := r.warm; w != nil && w.pre != nil && w.pre.fresh {
		// The CLI pre-started for a new session waits with this id.
		rr.SessionID = w.pre.session
	}
	if cs.file, err = sr.TranscriptFile(*rr); err != nil {
		r.log.Warn("no session continuity for this run", "error", err)
		rr.SessionID = ""
		return nil
	}
	cs.id = rr.SessionID
	_, seeds := sr.(seeder)
	if hist := rr.Messages[:max(0, len(rr.Messages)-1)]; hasTurns(hist) || seeds {
		if !r.replay(ctx, sr, rr, cs) && seeds {
			r.log.Warn("the new session's transcript could not be placed; the run keeps no session", "session", cs.id)
			rr.SessionID = ""
			return nil
		}
	}
	return cs
}

// seeder is a session runner whose CLI cannot start a session under an id
// the gateway chooses (codex.Runner): every new session starts from the
// transcript its ReplayTranscript writes (the earlier turns, or none) and
// is resumed.
type seeder interface {
	SeedsSessions() bool
}

// replayer is a session runner that can write a new session's transcript
// holding an earlier history as real turns (claude.Runner).
type replayer interface {
	ReplayTranscript(req executor.RunRequest) ([]byte, []string, error)
}

// replay gives a new session the history the client sent as real user and
// assistant turns, without model calls: the runner writes them as the
// session's transcript, placed in HOME, and the CLI resumes it with just
// the last message. When it cannot (another runner, a history of another
// shape, a failed placement), the history reaches the agent as text and
// replay reports false.
func (r *run) replay(ctx context.Context, sr sessionRunner, rr *executor.RunRequest, cs *chatSession) bool {
	rp, ok := sr.(replayer)
	if !ok {
		return false
	}
	data, anchors, err := rp.ReplayTranscript(*rr)
	if err == nil {
		err = executor.PlaceHomeFiles(ctx, r.sb, rr.Home, map[string][]byte{cs.file: data})
	}
	if err != nil {
		r.log.Debug("the history reaches the agent as text", "reason", err)
		return false
	}
	rr.Resume = true
	cs.resumed = true
	// The anchors index the client's conversation; a Create hook that
	// changed its turns leaves no fork points in them.
	if len(conversationChain(cs.conversation)) == len(anchors)+1 {
		cs.anchors = anchors
	}
	r.log.Debug("the history is replayed as the new session's turns", "session", cs.id, "messages", len(anchors))
	return true
}

// hasTurns reports whether msgs hold a user or assistant message.
func hasTurns(msgs []executor.Message) bool {
	for _, m := range msgs {
		if m.Role == "user" || m.Role == "assistant" {
			return true
		}
	}
	return false
}

// forgetFailedResume drops the chat's stored session when a run that
// resumed it failed in the agent (the CLI refused the transcript, or the
// run broke inside it): a retry of the same history must not meet the same
// session again. Cancellations and outages keep it.
func (r *run) forgetFailedResume(err error) {
	cs := r.session
	if cs == nil || !cs.resumed {
		return
	}
	switch KindOf(err) {
	case KindAgent, KindTimeout:
		r.log.Warn("the resumed session failed; the chat's next turn starts a new one", "session", cs.id, "error", err)
		if rmErr := os.RemoveAll(cs.dir); rmErr != nil {
			r.log.Warn("removing the failed session", "error", rmErr)
		}
	}
}

// saveSession copies the session's transcript out of the sandbox and
// stores it with the conversation it now corresponds to: the request's
// messages and the answer the client received.
func (r *run) saveSession(ctx context.Context, cs *chatSession, answer string) {
	if cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transcriptTimeout)
	defer cancel()
	var out, stderr bytes.Buffer
	var anchor string // the last answer's transcript entry
	full := path.Join(r.home(), cs.file)
	res, err := r.sb.Exec(ctx, &executor.Cmd{
		// A regular file only: the agent could leave a FIFO or a link at
		// the name.
		Args:   []string{"sh", "-c", `[ -f "$1" ] && [ ! -L "$1" ] || exit 3; exec cat -- "$1"`, "sh", full},
		Stdout: &out, Stderr: &stderr, Timeout: transcriptTimeout, MaxOutput: maxTranscript,
	})
	switch {
	case err != nil:
	case res.ExitCode == 3:
		err = fmt.Errorf("%s is missing or not a regular file", full)
	case res.ExitCode != 0:
		err = fmt.Errorf("reading %s exited with code %d: %s", full, res.ExitCode, bytes.TrimSpace(stderr.Bytes()))
	default:
		anchor, err = validTranscript(out.Bytes(), cs.id)
	}
	if err == nil {
		conv := append(cs.conversation[:len(cs.conversation):len(cs.conversation)], executor.Message{Role: "assistant", Content: answer})
		chain := conversationChain(conv)
		anchors := append(cs.anchors, make([]string, max(0, len(chain)-len(cs.anchors)))...)[:len(chain)]
		anchors[len(chain)-1] = anchor
		rec := &sessionRecord{SessionID: cs.id, Chain: chain, System: cs.system, Anchors: anchors, Updated: time.Now().UTC()}
		err = (&sessionStore{dir: r.o.opts.SessionDir}).save(cs.dir, rec, out.Bytes())
	}
	if err != nil {
		// A stale record must not outlive the turn it no longer matches.
		r.log.Warn("the chat's session was not kept; the next turn starts a new one", "error", err)
		_ = os.RemoveAll(cs.dir)
	}
}
