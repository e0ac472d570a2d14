package claude

import (
	"encoding/json"
	"fmt"
)

// stdinMessage is the one stream-json input line carrying the prompt.
func stdinMessage(prompt string) ([]byte, error) {
	line, err := json.Marshal(map[string]any{
		"type":               "user",
		"message":            map[string]any{"role": "user", "content": prompt},
		"parent_tool_use_id": nil,
		"session_id":         "",
	})
	if err != nil {
		return nil, fmt.Errorf("claude: encoding the prompt: %w", err)
	}
	return append(line, '\n'), nil
}
