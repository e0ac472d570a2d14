package scriptedresponses_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	sr "github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
)

func ExampleStart() {
	s := sr.Start(sr.WithTurns(sr.Turn{Text: "hé", Pieces: 1}))
	defer s.Close()
	resp, err := http.Post(s.URL+"/responses", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"input":"hi"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "event: ") {
			fmt.Println(line)
		}
	}
	fmt.Println(s.Requests()[0].UserPrompt())
	// Output:
	// event: response.created
	// event: response.in_progress
	// event: response.output_item.added
	// event: response.content_part.added
	// event: response.output_text.delta
	// event: response.output_text.done
	// event: response.content_part.done
	// event: response.output_item.done
	// event: response.completed
	// hi
}
