package scriptedopenai_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
)

func ExampleStart() {
	s := scriptedopenai.Start(scriptedopenai.WithTurns(scriptedopenai.Turn{Text: "hé", Reasoning: "think", Pieces: 1}))
	defer s.Close()
	resp, err := http.Post(s.URL+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "reasoning_content") || strings.Contains(line, `"content":"hé"`) || strings.Contains(line, "DONE") {
			fmt.Println(line[:min(len(line), 30)])
		}
	}
	fmt.Println(s.Requests()[0].LastUserText())
	// Output:
	// data: {"choices":[{"delta":{"r
	// data: {"choices":[{"delta":{"c
	// data: [DONE]
	// hi
}
