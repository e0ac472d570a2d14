package jsonl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/jsonl"
)

func ExampleReader() {
	out := `{"type":"system"}` + "\n" + strings.Repeat("x", 100) + "\n" + `{"type":"result"}` + "\n"
	r := jsonl.NewReader(strings.NewReader(out), 64)
	for {
		line, err := r.ReadLine()
		var tooLong *jsonl.LineTooLongError
		if errors.As(err, &tooLong) {
			fmt.Println("skipped:", tooLong.Line)
			continue
		}
		if err != nil {
			break
		}
		fmt.Println(string(line))
	}
	// Output:
	// {"type":"system"}
	// skipped: 2
	// {"type":"result"}
}

func ExampleWithWatchdog() {
	ctx, wd := jsonl.WithWatchdog(context.Background(), 20*time.Millisecond)
	defer wd.Stop()
	// Run the CLI with ctx and read its stdout through wd.Reader(stdout);
	// here nothing arrives.
	<-ctx.Done()
	fmt.Println(errors.Is(context.Cause(ctx), jsonl.ErrStalled))
	// Output: true
}
