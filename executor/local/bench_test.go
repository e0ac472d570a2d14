package local_test

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/executor"
)

// BenchmarkCreate measures a sandbox's time to ready, the whole
// create-exec-close cycle, and one exec through the helper:
//
//	go test -run '^$' -bench . -benchtime 20x ./executor/local/
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	e := newExecutor(b)
	b.Run("ready", func(b *testing.B) {
		for b.Loop() {
			sb, err := e.Create(ctx, testSpec("bench-ready"))
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := sb.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("cycle", func(b *testing.B) {
		for b.Loop() {
			sb, err := e.Create(ctx, testSpec("bench-cycle"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
			if err := sb.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exec", func(b *testing.B) {
		sb, err := e.Create(ctx, testSpec("bench-exec"))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = sb.Close(ctx) }()
		for b.Loop() {
			if _, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
