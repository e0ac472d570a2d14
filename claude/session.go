package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agentbox/agentbox/executor"
)

// uuidPattern is the form --session-id and --resume accept: the CLI
// refuses anything but a UUID.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// SessionsEnabled implements the middleware's session runner: it reports
// whether the assistant's arguments keep the CLI's session between turns
// (the "sessions" argument, true unless set to false). Invalid arguments
// report false; Invocation reports them.
func (r *Runner) SessionsEnabled(req executor.RunRequest) bool {
	args, err := ParseArguments(req.Arguments)
	return err == nil && args.Sessions
}

// TranscriptFile implements the middleware's session runner: where the CLI
// keeps the transcript of session req.SessionID, relative to req.Home. The
// CLI writes it to $CLAUDE_CONFIG_DIR/projects/<workdir's slug>/<id>.jsonl
// and --resume reads it from there (verified on 2.1.197 and 2.1.330).
func (r *Runner) TranscriptFile(req executor.RunRequest) (string, error) {
	if !uuidPattern.MatchString(req.SessionID) {
		return "", fmt.Errorf("%w: session id %q is not a lower-case UUID", executor.ErrInvalid, req.SessionID)
	}
	if req.Workdir == "" || !path.IsAbs(req.Workdir) {
		return "", fmt.Errorf("%w: Workdir %q must be an absolute path inside the container", executor.ErrInvalid, req.Workdir)
	}
	return path.Join(".claude", "projects", projectSlug(req.Workdir), req.SessionID+".jsonl"), nil
}

// projectSlug is the CLI's directory name for a project: its path with
// every character other than an ASCII letter or digit replaced by '-'
// ("/workspace" → "-workspace").
func projectSlug(dir string) string {
	return strings.Map(func(c rune) rune {
		if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return c
		}
		return '-'
	}, dir)
}

// checkSession validates the session fields of req against the
// assistant's arguments.
func checkSession(req executor.RunRequest, args Arguments) error {
	switch {
	case req.SessionID == "" && req.Resume:
		return fmt.Errorf("%w: Resume is set without a SessionID; name the session to resume", executor.ErrInvalid)
	case req.SessionID == "" && (req.ForkFrom != "" || req.ResumeAt != ""):
		return fmt.Errorf("%w: ForkFrom or ResumeAt is set without a SessionID; name the new session the fork starts", executor.ErrInvalid)
	case req.SessionID == "":
		return nil
	case !args.Sessions:
		return fmt.Errorf("%w: a SessionID was given but the assistant's sandbox.arguments.sessions is false", executor.ErrInvalid)
	case !uuidPattern.MatchString(req.SessionID):
		return fmt.Errorf("%w: session id %q is not a lower-case UUID; the CLI accepts only UUIDs", executor.ErrInvalid, req.SessionID)
	case req.ForkFrom == "" && req.ResumeAt == "":
		return nil
	case req.Resume:
		return fmt.Errorf("%w: Resume and ForkFrom are both set; a fork starts a new session, so unset Resume", executor.ErrInvalid)
	case !uuidPattern.MatchString(req.ForkFrom) || !uuidPattern.MatchString(req.ResumeAt):
		return fmt.Errorf("%w: ForkFrom %q and ResumeAt %q must both be lower-case UUIDs", executor.ErrInvalid, req.ForkFrom, req.ResumeAt)
	case req.ForkFrom == req.SessionID:
		return fmt.Errorf("%w: ForkFrom names the new session itself; give the fork a new SessionID", executor.ErrInvalid)
	}
	return nil
}

// sessionArgs are the flags that choose the CLI's session: none kept
// (--no-session-persistence), a new one under a given id, an existing one
// resumed, or a new one forked from an existing one at an entry.
func sessionArgs(req executor.RunRequest) []string {
	switch {
	case req.SessionID == "":
		return []string{"--no-session-persistence"}
	case req.Resume:
		return []string{"--resume", req.SessionID}
	case req.ForkFrom != "":
		// Claude Code 2.1.330: the copy gets the new id and keeps the
		// entries' uuids; the resumed transcript stops at ResumeAt.
		return []string{"--session-id", req.SessionID, "--fork-session", "--resume", req.ForkFrom, "--resume-session-at", req.ResumeAt}
	default:
		return []string{"--session-id", req.SessionID}
	}
}

// ReplayTranscript implements the middleware's history replay: a
// transcript for the new session req.SessionID that holds the
// conversation before req's last message as the CLI's own user and
// assistant entries (text only, chained by parentUuid), so that the CLI
// started with --resume req.SessionID sends those turns to the model as
// real messages and makes no model call for them. It returns, for each
// user or assistant message of that history, the uuid of its entry for an
// assistant message ("" for a user one): where a later fork may cut. It
// fails when the history is not user-first alternating turns (the API
// needs that shape), so the caller can fall back to the history as text.
func (r *Runner) ReplayTranscript(req executor.RunRequest) ([]byte, []string, error) {
	if !uuidPattern.MatchString(req.SessionID) {
		return nil, nil, fmt.Errorf("%w: the session id %q is not a UUID", executor.ErrInvalid, req.SessionID)
	}
	if len(req.Messages) == 0 {
		return nil, nil, fmt.Errorf("%w: nothing to replay", executor.ErrInvalid)
	}
	var buf bytes.Buffer
	var anchors []string
	var parent any
	want := "user"
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, m := range req.Messages[:len(req.Messages)-1] {
		if m.Role != "user" && m.Role != "assistant" {
			continue // system messages reach the CLI as its system prompt
		}
		if m.Role != want {
			return nil, nil, fmt.Errorf("%w: the history has two %s messages in a row or starts with an answer", executor.ErrInvalid, m.Role)
		}
		id := uuid.NewString()
		var msg any = map[string]any{"role": "user", "content": m.Content}
		anchor := ""
		if m.Role == "assistant" {
			msg = map[string]any{"role": "assistant", "type": "message", "id": "msg_replayed_" + strings.ReplaceAll(id, "-", ""),
				"model": req.Model, "content": []any{map[string]any{"type": "text", "text": m.Content}},
				"stop_reason": "end_turn", "stop_sequence": nil, "usage": map[string]any{"input_tokens": 0, "output_tokens": 0}}
			anchor = id
			want = "user"
		} else {
			want = "assistant"
		}
		line, err := json.Marshal(map[string]any{"parentUuid": parent, "isSidechain": false, "type": m.Role, "message": msg,
			"uuid": id, "timestamp": now, "userType": "external", "cwd": req.Workdir, "sessionId": req.SessionID})
		if err != nil {
			return nil, nil, fmt.Errorf("claude: replay: %w", err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
		anchors = append(anchors, anchor)
		parent = id
	}
	if len(anchors) == 0 {
		return nil, nil, fmt.Errorf("%w: no earlier turns to replay", executor.ErrInvalid)
	}
	if want != "user" {
		return nil, nil, fmt.Errorf("%w: the history ends with a user message before the last one", executor.ErrInvalid)
	}
	return buf.Bytes(), anchors, nil
}
