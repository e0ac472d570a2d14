package scriptedapi_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/scriptedapi"
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
