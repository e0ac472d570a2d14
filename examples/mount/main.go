// Command mount is the README's "Mounting agentbox in an existing gateway"
// as a program: a gateway's own handler (here, a mux that serves one plain
// model) wrapped by agentbox's middleware, with the default Docker
// backend. It is also the program whose dependencies show what a
// Docker-only gateway links (TestDockerGatewayLinksNoKubernetes in the
// module root).
//
//	go run ./examples/mount -dir examples -data /tmp/agentbox -addr 127.0.0.1:8080
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"

	"github.com/agentbox/agentbox"
)

func main() {
	dir := flag.String("dir", "examples", "gateway directory (assistants/, connectors/)")
	data := flag.String("data", "/var/lib/agentbox", "data directory")
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	yourMux := http.NewServeMux()
	yourMux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","model":"own","choices":[{"index":0,"message":{"role":"assistant","content":"from the gateway's own path"},"finish_reason":"stop"}]}`)
	})

	ctx := context.Background()
	ab, err := agentbox.New(ctx, agentbox.Options{Dir: *dir, DataDir: *data, Logger: slog.Default()})
	if err != nil {
		log.Fatal(err) // names what to fix: a config or hook error, a missing runner, no Docker
	}
	defer func() { _ = ab.Close() }()
	log.Fatal(http.ListenAndServe(*addr, ab.Middleware(yourMux)))
}
