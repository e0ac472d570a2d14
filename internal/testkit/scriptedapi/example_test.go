package scriptedapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
)

func ExampleStart() {
	s := scriptedapi.Start(scriptedapi.WithTurns(scriptedapi.Say("2")))
	defer s.Close()
	resp, err := http.Post(s.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"1+1?"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(b), `"text":"2"`))
	fmt.Println(s.MessageRequests()[0].LastUserText())
	// Output:
	// 200 true
	// 1+1?
}

// ExampleDemo serves the offline demo's model on a unix socket, as a
// gateway without network access would.
func ExampleDemo() {
	dir, err := os.MkdirTemp("", "demo")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sock := filepath.Join(dir, "model.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := &http.Server{Handler: scriptedapi.New(scriptedapi.WithScript(scriptedapi.Demo("/workspace"))), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Post("http://model/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"demo"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	var msg struct {
		StopReason string `json:"stop_reason"`
		Content    []struct{ Type, Name string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&msg)
	fmt.Println(msg.StopReason, msg.Content[1].Type, msg.Content[1].Name)
	// Output: tool_use tool_use Write
}
