package modelproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// serveWarmUp serves a WarmUp for testToken on loopback and returns its
// base URL.
func serveWarmUp(t *testing.T, maxBody int64) (*WarmUp, string) {
	t.Helper()
	wu, err := NewWarmUp(testToken, maxBody)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- wu.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, wu.Close())
		require.NoError(t, <-served, "Serve returns nil after Close")
	})
	return wu, "http://" + ln.Addr().String()
}

// TestWarmUpAnswersLikeTheAPI: a real Anthropic client gets a whole
// streamed message from the warm-up, which closes each connection.
func TestWarmUpAnswersLikeTheAPI(t *testing.T) {
	wu, base := serveWarmUp(t, 0)
	c := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey(testToken), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("a long conversation ", 1<<16)))}}
	for range 2 {
		stream := c.Messages.NewStreaming(context.Background(), params)
		var acc anthropic.Message
		for stream.Next() {
			require.NoError(t, acc.Accumulate(stream.Current()))
		}
		require.NoError(t, stream.Err())
		require.Len(t, acc.Content, 1)
		assert.Equal(t, WarmUpReply, acc.Content[0].Text)
		assert.Equal(t, anthropic.StopReasonEndTurn, acc.StopReason)
		assert.Equal(t, warmUpModel, acc.Model)
	}
	assert.Equal(t, 2, wu.Calls())

	req, err := http.NewRequest("POST", base+PathMessages+"?beta=true", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, 200, res.StatusCode, "a bearer token and ?beta=true, as the CLI sends them")
	assert.True(t, res.Close, "the answer closes its connection: the next call must reach the request's own proxy")
}

// TestWarmUpRefuses: the wrong or no token, other endpoints and methods,
// and a body over the limit are refused, and none is counted as a call.
func TestWarmUpRefuses(t *testing.T) {
	wu, base := serveWarmUp(t, 100)
	for name, tc := range map[string]struct {
		method, path, key, body string
		status                  int
	}{
		"no token":     {"POST", PathMessages, "", "{}", 401},
		"wrong token":  {"POST", PathMessages, testToken + "x", "{}", 401},
		"count tokens": {"POST", PathCountTokens, testToken, "{}", 403},
		"models":       {"GET", "/v1/models", testToken, "", 403},
		"get messages": {"GET", PathMessages, testToken, "", 403},
		"query":        {"POST", PathMessages + "?x=1", testToken, "{}", 403},
		"dot segment":  {"POST", "/v1/../v1/messages", testToken, "{}", 403},
		"large body":   {"POST", PathMessages, testToken, `{"pad":"` + strings.Repeat("a", 200) + `"}`, 413},
	} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.key != "" {
				req.Header.Set("X-Api-Key", tc.key)
			}
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			assert.Equal(t, tc.status, res.StatusCode, "%s", b)
			assert.Equal(t, "error", gjson.GetBytes(b, "type").String(), "Anthropic's error shape: %s", b)
		})
	}
	assert.Zero(t, wu.Calls())
	_, err := NewWarmUp("", 0)
	assert.Error(t, err, "a warm-up without a token")
}
