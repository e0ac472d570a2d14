package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// ExampleNew serves a handler (here one that streams two text deltas) as an
// OpenAI-compatible endpoint and sends it one non-streamed request.
func ExampleNew() {
	h := middleware.HandlerFunc(func(_ context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		for _, t := range []string{"Hello, ", req.UserID} {
			if err := emit(executor.Event{Kind: executor.EventText, Text: t}); err != nil {
				return nil, err
			}
		}
		return &middleware.Response{Content: "Hello, " + req.UserID, FinishReason: executor.FinishStop,
			Usage: executor.Usage{InputTokens: 5, OutputTokens: 2}}, nil
	})
	s, err := openai.New(openai.Options{Handler: h})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"coder","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set(openai.HeaderUser, "alice")
	req.Header.Set(openai.HeaderChat, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status)
	fmt.Println(strings.Contains(string(body), `"content":"Hello, alice"`), strings.Contains(string(body), `"total_tokens":7`))
	// Output:
	// 200 OK
	// true true
}
