package modelproxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchBody is shaped like a Claude Code request: a system prompt, tool
// definitions and a conversation, about 60 KB.
func benchBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-6","messages":[`)
	for i := range 20 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":%q}]}`, strings.Repeat("line of a file in the workspace\n", 60))
	}
	b.WriteString(`],"system":[{"type":"text","text":"You are Claude Code."}],"tools":[`)
	for i := range 15 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"Tool%d","description":%q,"input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}`, i, strings.Repeat("describes the tool ", 20))
	}
	b.WriteString(`],"metadata":{"user_id":"u"},"max_tokens":32000,"thinking":{"type":"adaptive"},"stream":true}`)
	return []byte(b.String())
}

// BenchmarkAddedCost is the cost per allowed model call: "direct" posts to
// the upstream over loopback TCP, "proxy" posts the same body through the
// proxy on a unix socket (token check, endpoint and body policy, byte
// budget, header filtering, metering). The proxy's added cost is the
// difference of the two ns/op.
func BenchmarkAddedCost(b *testing.B) {
	body := benchBody()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	b.Cleanup(up.Close)
	run := func(b *testing.B, c *http.Client, url string) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("X-Api-Key", testToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, up.Client(), up.URL+"/v1/messages?beta=true") })
	b.Run("proxy", func(b *testing.B) {
		p, err := New(Options{Upstream: up.URL, APIKey: testKey, Token: testToken, Model: "claude-sonnet-4-6"})
		if err != nil {
			b.Fatal(err)
		}
		sock := serveSockB(b, p)
		run(b, unixClient(sock), "http://sandbox/v1/messages?beta=true")
	})
}

// BenchmarkPolicy is the CPU the default-deny policy adds to one allowed
// call, without the network: endpoint check, header allowlist, JSON
// validation and the model/max_tokens pinning of a Claude Code-sized body.
func BenchmarkPolicy(b *testing.B) {
	body := benchBody()
	p, err := New(Options{Upstream: "http://127.0.0.1:1", APIKey: testKey, Token: testToken, Model: "claude-sonnet-4-6", MaxOutputTokens: 16000})
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/messages?beta=true", nil)
	r.Header.Set("Anthropic-Version", "2023-06-01")
	r.Header.Set("X-Forwarded-For", "1.2.3.4")
	r.Header.Set("X-Stainless-Lang", "js")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		path, _, f := messagesSpec.endpoint(r)
		if f != nil {
			b.Fatal(f.reason)
		}
		sh, f := p.shape(path, body)
		if f != nil || sh.size == 0 {
			b.Fatal("refused")
		}
		h := http.Header{}
		copyAllowed(h, r.Header, requestHeaders, requestHeaderPrefixes)
	}
}
