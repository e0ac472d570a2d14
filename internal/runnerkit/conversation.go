package runnerkit

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/executor"
)

// History tags: earlier turns of a conversation that no session holds
// reach the model inside the prompt, wrapped in these.
const (
	HistoryOpen  = "<conversation_history>"
	HistoryClose = "</conversation_history>"
	HistoryIntro = "The conversation so far, oldest first. Earlier answers may mention files that are still in the workspace. Answer the message after the history."
)

// SplitConversation returns the system prompt (the assistant's own
// instructions, then every system message in order) and the prompt the
// CLI receives: the last user message, preceded by the earlier user and
// assistant turns as a tagged transcript when there are any and the run
// does not continue a session (which holds them).
func SplitConversation(req executor.RunRequest) (system, prompt string, err error) {
	msgs := req.Messages
	if len(msgs) == 0 {
		return "", "", fmt.Errorf("%w: the conversation is empty; send at least one user message", executor.ErrInvalid)
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" {
		return "", "", fmt.Errorf("%w: the last message is from %q; the conversation must end with the user's message", executor.ErrInvalid, last.Role)
	}
	if strings.TrimSpace(last.Content) == "" {
		return "", "", fmt.Errorf("%w: the user's message is empty; send some text", executor.ErrInvalid)
	}
	var sys []string
	if s := strings.TrimSpace(req.SystemPrompt); s != "" {
		sys = append(sys, s)
	}
	var hist strings.Builder
	for i, m := range msgs[:len(msgs)-1] {
		switch m.Role {
		case "system":
			if s := strings.TrimSpace(m.Content); s != "" {
				sys = append(sys, s)
			}
		case "user", "assistant":
			if strings.TrimSpace(m.Content) != "" {
				fmt.Fprintf(&hist, "<%s>\n%s\n</%s>\n", m.Role, m.Content, m.Role)
			}
		default:
			return "", "", fmt.Errorf("%w: message %d has role %q; use system, user or assistant", executor.ErrInvalid, i, m.Role)
		}
	}
	prompt = last.Content
	if hist.Len() > 0 && !req.Continues() {
		prompt = HistoryOpen + "\n" + HistoryIntro + "\n" + hist.String() + HistoryClose + "\n\n" + last.Content
	}
	return strings.Join(sys, "\n\n"), prompt, nil
}
