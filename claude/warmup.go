package claude

import (
	"encoding/json"
	"errors"
	"fmt"
)

// warmUpID is the control request id of the warm-up.
const warmUpID = "agentbox-warm-up"

// WarmUpQuestion is the side question of the warm-up: it reaches only the
// warm-up route, never a model.
const WarmUpQuestion = "agentbox warm-up: reply with ok."

// WarmUp returns the warm-up of a CLI that the runner's Invocation started
// and that waits for its message on stdin: line, for its stdin, asks a
// side question (the control request behind the CLI's /btw), which builds
// and sends a model call from the CLI's system prompt, tools and
// conversation exactly as a message would, and writes nothing to the
// session's transcript (checked with 2.1.330: the message's call after it
// is byte for byte the call without it). Most of a first message's cost
// in a new process is the CLI's JavaScript doing that work for the first
// time; after the warm-up the message's first model call leaves about
// 40 ms sooner. The call goes to the sandbox's model route, which must
// answer it without the upstream (modelproxy.WarmUp).
//
// end takes the CLI's stdout lines, one at a time, up to the warm-up's
// answer: it reports true at that answer, false for a progress line, and
// an error with false for any other line (the CLI did something else and
// must not take a request). A refused warm-up (a CLI without side
// questions) ends with true and an error: the CLI is unchanged and can
// take its message.
func (r *Runner) WarmUp() (line []byte, end func(line []byte) (bool, error)) {
	line, _ = json.Marshal(map[string]any{
		"type": "control_request", "request_id": warmUpID,
		"request": map[string]any{"subtype": "side_question", "question": WarmUpQuestion},
	})
	return append(line, '\n'), warmUpEnd
}

// errWarmUpRefused is end's error for a CLI that answered the warm-up
// with an error.
var errWarmUpRefused = errors.New("claude: the CLI refused the warm-up")

// warmUpEnd is WarmUp's end.
func warmUpEnd(line []byte) (bool, error) {
	var m struct {
		Type      string `json:"type"`
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Response  struct {
			Subtype   string `json:"subtype"`
			RequestID string `json:"request_id"`
			Error     string `json:"error"`
		} `json:"response"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return false, fmt.Errorf("claude: the CLI wrote a line that is not JSON during the warm-up: %w", err)
	}
	switch {
	case m.Type == "system" && m.Subtype == "control_request_progress" && m.RequestID == warmUpID:
		return false, nil
	case m.Type == "control_response" && m.Response.RequestID == warmUpID:
		if m.Response.Subtype != "success" {
			return true, fmt.Errorf("%w: %s", errWarmUpRefused, m.Response.Error)
		}
		return true, nil
	}
	return false, fmt.Errorf("claude: the CLI wrote a %q line during the warm-up, not the warm-up's answer", m.Type+"/"+m.Subtype)
}
