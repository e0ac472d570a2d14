package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/middleware"
)

// BenchmarkConcurrentChats sends 50 streamed requests at once, ten users
// with five chats each, through the example gateway's HTTP adapter (real
// Docker, the real CLI, the scripted model), with admission control at its
// defaults and off, in the same run. Each iteration is one burst of 50;
// run it with -benchtime=1x. It reports errors, the p50 and p95 request
// latency in seconds and requests per minute.
func BenchmarkConcurrentChats(b *testing.B) {
	const chats, users = 50, 10
	for _, mode := range []struct {
		name string
		adm  middleware.Admission
	}{
		// The derived bounds, with a wait long enough for a slow machine:
		// the benchmark measures latency, not the queue's time limit.
		{"admission=on", middleware.Admission{MaxWait: 30 * time.Minute}},
		{"admission=off", middleware.Admission{Off: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			g, _ := startGateway(b, func(o *Options) { o.Admission = mode.adm })
			var lat []time.Duration
			errs, iter := 0, 0
			start := time.Now()
			for b.Loop() {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range chats {
					wg.Go(func() {
						user, chat := fmt.Sprint("bench-u", i%users), fmt.Sprintf("bench-%d-%d", iter, i)
						t0 := time.Now()
						res, err := chatRequest(context.Background(), newClient(g.URL, user, chat), chat, demoPrompt, func(extension, string) {})
						if err == nil && res.Content == "" {
							err = fmt.Errorf("chat %s: empty answer", chat)
						}
						d := time.Since(t0)
						mu.Lock()
						defer mu.Unlock()
						lat = append(lat, d)
						if err != nil {
							errs++
							b.Logf("chat %s: %v", chat, err)
						}
					})
				}
				wg.Wait()
				iter++
			}
			elapsed := time.Since(start)
			slices.Sort(lat)
			b.ReportMetric(float64(errs), "errors")
			b.ReportMetric(lat[len(lat)/2].Seconds(), "p50_s")
			b.ReportMetric(lat[len(lat)*95/100].Seconds(), "p95_s")
			b.ReportMetric(float64(len(lat))/elapsed.Minutes(), "req/min")
			b.ReportMetric(float64(len(g.Model.MessageRequests()))/float64(len(lat)), "model_calls/req")
		})
	}
}
