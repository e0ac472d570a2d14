package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// CodexDir is CODEX_HOME relative to the run's HOME: the CLI's state
// (sessions, logs, its cache of bundled skills) lives there, in the
// sandbox's HOME, outside the workspace.
const CodexDir = ".codex"

// SessionsDir is where the runner keeps session transcripts, relative to
// CODEX_HOME. The CLI finds a session by id in any directory below
// $CODEX_HOME/sessions (its own files go to sessions/YYYY/MM/DD), reads the
// file's first line for the session's metadata and appends the turn to it.
const SessionsDir = "sessions/agentbox"

// uuidPattern is the form a session id takes: the CLI accepts any UUID,
// the middleware chooses version 4 ones.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// SessionsEnabled implements the middleware's session runner: it reports
// whether the assistant's arguments keep the CLI's session between turns
// (the "sessions" argument, true unless set to false). Invalid arguments
// report false; Invocation reports them.
func (r *Runner) SessionsEnabled(req executor.RunRequest) bool {
	args, err := ParseArguments(req.Arguments)
	return err == nil && args.Sessions
}

// SeedsSessions implements the middleware's session seeder: the CLI
// cannot start a session under an id the gateway chooses, so every session
// starts from the transcript ReplayTranscript writes (its metadata, and
// the earlier turns when there are any) and every run resumes one.
func (r *Runner) SeedsSessions() bool { return true }

// TranscriptFile implements the middleware's session runner: where session
// req.SessionID's transcript (the CLI's "rollout") lives, relative to
// req.Home.
func (r *Runner) TranscriptFile(req executor.RunRequest) (string, error) {
	if !uuidPattern.MatchString(req.SessionID) {
		return "", fmt.Errorf("%w: session id %q is not a lower-case UUID", executor.ErrInvalid, req.SessionID)
	}
	return path.Join(CodexDir, SessionsDir, "rollout-"+req.SessionID+".jsonl"), nil
}

// checkSession validates the session fields of req against the
// assistant's arguments.
func checkSession(req executor.RunRequest, args Arguments) error {
	switch {
	case req.ForkFrom != "" || req.ResumeAt != "":
		return fmt.Errorf("%w: the codex runner does not fork a session at an entry; start a new session with the history replayed (ReplayTranscript)", executor.ErrInvalid)
	case req.SessionID == "" && req.Resume:
		return fmt.Errorf("%w: Resume is set without a SessionID; name the session to resume", executor.ErrInvalid)
	case req.SessionID == "":
		return nil
	case !args.Sessions:
		return fmt.Errorf("%w: a SessionID was given but the assistant's sandbox.arguments.sessions is false", executor.ErrInvalid)
	case !uuidPattern.MatchString(req.SessionID):
		return fmt.Errorf("%w: session id %q is not a lower-case UUID", executor.ErrInvalid, req.SessionID)
	case !req.Resume:
		return fmt.Errorf("%w: session %s is new, and the CLI cannot start a session under a given id; place the transcript ReplayTranscript writes and resume it", executor.ErrInvalid, req.SessionID)
	}
	return nil
}

// sessionArgs are the arguments that choose the CLI's session: none kept
// (--ephemeral), or the session resumed.
func sessionArgs(req executor.RunRequest) []string {
	if req.SessionID == "" {
		return []string{"--ephemeral"}
	}
	return []string{"resume", req.SessionID}
}

// rolloutLine is one line of a transcript: the CLI's own shape, plus the
// sessionId the middleware checks a stored transcript by (the CLI keeps
// fields it does not know).
type rolloutLine struct {
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
	SessionID string `json:"sessionId,omitempty"`
	Payload   any    `json:"payload"`
}

// ReplayTranscript implements the middleware's history replay: the
// transcript of the new session req.SessionID, holding the conversation
// before req's last message as the CLI's own message items, so that the
// CLI resumed with the last message sends them to the model as real turns
// and makes no model call for them. The first line is the session's
// metadata (the CLI refuses a transcript without it); it names the session
// twice, as the CLI reads it (payload.id) and as the middleware checks it
// (sessionId). An empty history gives the metadata alone: how every new
// session starts (SeedsSessions). The returned fork points are all empty:
// the CLI forks only a whole session, so a branch after an earlier answer
// is replayed instead.
func (r *Runner) ReplayTranscript(req executor.RunRequest) ([]byte, []string, error) {
	if !uuidPattern.MatchString(req.SessionID) {
		return nil, nil, fmt.Errorf("%w: the session id %q is not a UUID", executor.ErrInvalid, req.SessionID)
	}
	if req.Workdir == "" || !path.IsAbs(req.Workdir) {
		return nil, nil, fmt.Errorf("%w: Workdir %q must be an absolute path inside the container", executor.ErrInvalid, req.Workdir)
	}
	if len(req.Messages) == 0 {
		return nil, nil, fmt.Errorf("%w: no message; the last one is the turn's prompt", executor.ErrInvalid)
	}
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	lines := []rolloutLine{{Timestamp: now, Type: "session_meta", SessionID: req.SessionID, Payload: map[string]any{
		"id": req.SessionID, "timestamp": now, "cwd": req.Workdir,
		// Both are required; the CLI writes its own version in its
		// sessions and reads any string here.
		"originator": "agentbox", "cli_version": "", "source": "exec",
	}}}
	var anchors []string
	for _, m := range req.Messages[:len(req.Messages)-1] {
		var part string
		switch m.Role {
		case "user":
			part = "input_text"
		case "assistant":
			part = "output_text"
		default:
			continue // system messages reach the CLI as developer instructions
		}
		lines = append(lines, rolloutLine{Timestamp: now, Type: "response_item", Payload: map[string]any{
			"type": "message", "role": m.Role, "content": []any{map[string]string{"type": part, "text": m.Content}},
		}})
		anchors = append(anchors, "")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return nil, nil, fmt.Errorf("codex: replay: %w", err)
		}
	}
	return buf.Bytes(), anchors, nil
}
