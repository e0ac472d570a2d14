package middleware

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkTranscriptCheck is the CPU the gateway spends on a chat's
// transcript after each turn (checking it names only the chat's session
// and finding the last answer's entry): a 200-entry transcript of about
// 0.5 MB, a chat some twenty turns long.
func BenchmarkTranscriptCheck(b *testing.B) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	var sb strings.Builder
	for i := range 200 {
		typ := []string{"user", "assistant"}[i%2]
		fmt.Fprintf(&sb, `{"parentUuid":"%08d-0000-4000-8000-000000000000","isSidechain":false,"userType":"external","cwd":"/workspace","sessionId":%q,"version":"2.1.330","gitBranch":"","type":%q,"message":{"id":"msg_%d","type":"message","role":%q,"model":"claude-sonnet-4-5","content":[{"type":"text","text":%q}],"stop_reason":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":345}},"uuid":"%08d-0000-4000-8000-000000000001","timestamp":"2026-11-27T06:00:00.000Z"}`+"\n",
			i, id, typ, i, typ, strings.Repeat("Some answer text with \"quotes\" and unicode é. ", 50), i)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		anchor, err := validTranscript(data, id)
		require.NoError(b, err)
		require.NotEmpty(b, anchor)
	}
}
