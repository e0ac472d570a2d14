package cursor

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/executor"
)

// composePrompt turns the conversation into cursor-agent's single prompt.
// System messages are returned separately (they join the assistant's
// instructions in the rules file). With one user turn the prompt is that
// turn's text unchanged; with earlier turns it is a tagged transcript of
// them followed by the latest user message, because the CLI cannot be given
// prior turns any other way.
func composePrompt(msgs []executor.Message) (system, prompt string, err error) {
	var sys []string
	var turns []executor.Message
	for i, m := range msgs {
		switch m.Role {
		case "system":
			sys = append(sys, m.Content)
		case "user", "assistant":
			turns = append(turns, m)
		default:
			return "", "", fmt.Errorf("%w: message %d has role %q; use system, user or assistant", executor.ErrInvalid, i, m.Role)
		}
	}
	if len(turns) == 0 || turns[len(turns)-1].Role != "user" {
		return "", "", fmt.Errorf("%w: the conversation must end with a user message (the prompt for this run)", executor.ErrInvalid)
	}
	last := turns[len(turns)-1].Content
	if strings.TrimSpace(last) == "" {
		return "", "", fmt.Errorf("%w: the last user message is empty; send the request text", executor.ErrInvalid)
	}
	system = joinNonEmpty("\n\n", sys...)
	history := turns[:len(turns)-1]
	if len(history) == 0 {
		return system, last, nil
	}
	var b strings.Builder
	b.WriteString("Earlier turns of this conversation, oldest first:\n\n<conversation_history>\n")
	for _, m := range history {
		fmt.Fprintf(&b, "<%s>\n%s\n</%s>\n", m.Role, m.Content, m.Role)
	}
	b.WriteString("</conversation_history>\n\nThe user's latest message, which you are answering now:\n\n")
	b.WriteString(last)
	return system, b.String(), nil
}
