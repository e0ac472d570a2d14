package anthropicopenai_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/services/modelproxy"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
)

// TestBehindModelProxy plugs the Transport in as the model proxy's upstream
// client: the proxy's meter reads the provider's figures from the
// translated stream, with the connector key swapped in.
func TestBehindModelProxy(t *testing.T) {
	u := scriptedopenai.Usage{PromptTokens: 700, CompletionTokens: 33, CachedTokens: 600}
	prov := scriptedopenai.Start(scriptedopenai.WithTurns(scriptedopenai.Turn{Text: "metered", Usage: &u}, scriptedopenai.Turn{Text: "again", Usage: &u}))
	defer prov.Close()
	tr, err := anthropicopenai.New(anthropicopenai.Options{BaseURL: prov.URL, StreamUsage: true})
	require.NoError(t, err)
	p, err := modelproxy.New(modelproxy.Options{Upstream: "https://api.deepseek.com/v1", APIKey: "sk-connector", Token: "tok",
		Client: &http.Client{Transport: tr}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = p.Serve(ln) }()
	defer func() { _ = p.Close() }()

	for _, stream := range []string{"true", "false"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/messages?beta=true",
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":10,"stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Api-Key", "tok")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	}
	calls := p.Calls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		assert.Empty(t, c.Error)
		assert.EqualValues(t, 100, c.Usage.InputTokens)
		assert.EqualValues(t, 600, c.Usage.CacheReadInputTokens)
		assert.EqualValues(t, 33, c.Usage.OutputTokens)
	}
	assert.Equal(t, "Bearer sk-connector", prov.Requests()[0].Header.Get("Authorization"), "the connector key, taken from the proxy's X-Api-Key")
}

// TestCancelStopsStream: a client that goes away mid-stream cuts the
// provider call too, instead of leaving it running.
func TestCancelStopsStream(t *testing.T) {
	gone := make(chan struct{})
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","choices":[{"index":0,"delta":{"content":"first"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	}))
	defer prov.Close()
	tr, err := anthropicopenai.New(anthropicopenai.Options{BaseURL: prov.URL + "/v1"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://anthropic.invalid/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, `"text":"first"`) {
			break
		}
	}
	cancel()
	_, err = io.Copy(io.Discard, br)
	assert.Error(t, err, "the body ends with the cancellation, not a clean EOF")
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider call outlived the cancelled request")
	}
	_ = resp.Body.Close()
}
