// Command gateway is a runnable example of an LLM gateway with the agentbox
// middleware in its handler chain. It serves the OpenAI-compatible API
// (POST /v1/chat/completions, GET /v1/models) for the assistants of a
// gateway directory (default: examples/, with assistants/coder and
// assistants/codex sandboxed and assistants/qa plain). Requests for a
// sandboxed assistant run its agent CLI (Claude Code for coder, OpenAI's
// Codex CLI for codex) in a Docker container; the others go to the
// gateway's own next handler, which calls the assistant's connector
// directly.
//
// With no API key in the environment the connectors answer from a built-in
// scripted model server, so that the whole flow runs offline; the log says
// so loudly. Export ANTHROPIC_API_KEY and OPENAI_API_KEY to use the real
// APIs.
//
// Usage:
//
//	go run ./examples/gateway [-addr 127.0.0.1:8080] [-dir examples] [-data DIR] [-quota loop]
//	go run ./examples/gateway -demo   # start, send the sandboxed request to coder and codex, print, exit
//
// Then, for example:
//
//	curl -s localhost:8080/v1/chat/completions -H 'X-Agentbox-User: alice' -H 'X-Agentbox-Chat: c1' \
//	  -d '{"model":"coder","messages":[{"role":"user","content":"write hello.txt"}]}'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, starts the gateway and serves until ctx ends, or, with
// -demo, sends one request and returns. It returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := Options{}
	fs.StringVar(&o.Dir, "dir", "examples", "gateway directory with assistants/ and connectors/")
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	fs.StringVar(&o.DataDir, "data", defaultDataDir(), "directory for the chats' workspaces")
	fs.StringVar(&o.HelperBinary, "helper", "", "helper binary to bind-mount into sandboxes (default: the image's own)")
	fs.StringVar(&o.Executor, "executor", "docker", "sandbox backend: docker (containers), local (bubblewrap on this host, no container runtime; needs -helper) or kubernetes (pods; see -kubeconfig)")
	fs.StringVar(&o.Kubernetes.Kubeconfig, "kubeconfig", os.Getenv("AGENTBOX_KUBECONFIG"), "kubernetes executor: kubeconfig file (default $AGENTBOX_KUBECONFIG; empty: the in-cluster service account)")
	fs.StringVar(&o.Kubernetes.Namespace, "namespace", "agentbox", "kubernetes executor: namespace of the sandbox pods, claims and leases")
	fs.StringVar(&o.Kubernetes.StorageClass, "storage-class", "", "kubernetes executor: storage class of the workspaces' claims (empty: a workspace lives as long as its pod)")
	fs.StringVar(&o.Kubernetes.ImagePullPolicy, "image-pull-policy", "", "kubernetes executor: Always, IfNotPresent (default) or Never (images imported into the nodes)")
	fs.StringVar(&o.Kubernetes.InstanceID, "instance", "", "kubernetes executor: this replica's name on its pods and leases, e.g. its pod name (default: a random one); another replica takes its chats over once it stops renewing their leases")
	fs.IntVar(&o.Kubernetes.Successors, "successors", 0, "kubernetes executor: successor pods kept at most, all chats together: when a chat's request ends, a pod over its workspace claim starts for its next one, which then skips the pod's start (needs -storage-class; 0: off)")
	fs.IntVar(&o.Pool, "pool", 0, "docker and kubernetes executors: started containers (pods) kept ready per sandbox configuration, so that new chats' first requests skip their start (docker: needs root on the Docker host; 0: off)")
	fs.StringVar(&o.Quota, "quota", "", "workspace quota mode (max_disk, max_inodes): empty for the executor's default (docker: watchdog), watchdog (docker: no file past max_disk, the workspace measured and a run over it stopped; kubernetes: the pod's helper measures) or loop (docker: an ext4 image per workspace, the kernel refuses writes past the quota; needs root, e2fsprogs and loop devices)")
	fs.StringVar(&o.Offline, "offline", "auto", "scripted model server for connectors: auto (when their key is unset), always, never")
	fs.IntVar(&o.Admission.MaxRuns, "max-sandboxes", 0, "sandboxed requests in flight at once (0: four per core)")
	fs.IntVar(&o.Admission.MaxRunsPerUser, "max-sandboxes-per-user", 0, "one user's sandboxed requests in flight (0: half of -max-sandboxes)")
	fs.IntVar(&o.Admission.MaxQueue, "max-queue", 0, "requests waiting for a sandbox before the gateway answers 429 (0: 100)")
	fs.DurationVar(&o.Admission.MaxWait, "max-queue-wait", 0, "longest wait for a sandbox, the chat's lease included, before 429 (0: 5m)")
	fs.BoolVar(&o.Admission.Off, "no-admission", false, "turn admission control off: every request starts its sandbox at once")
	fs.StringVar(&o.OTLPEndpoint, "otlp", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "OTLP/HTTP endpoint for traces, e.g. http://127.0.0.1:4318 (default $OTEL_EXPORTER_OTLP_ENDPOINT; metrics are on /metrics)")
	demo := fs.Bool("demo", false, "start on a free port, send the sandboxed chat request to coder (Claude Code) and then codex (the Codex CLI), print each answer and file, exit")
	demoOnly := fs.String("demo-assistant", "", "with -demo: ask this sandboxed assistant only (coder, codex, or one of -dir's)")
	level := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "gateway: unexpected argument %q; flags only (see -h)\n", fs.Arg(0))
		return 2
	}
	switch o.Quota {
	case "", "watchdog", "loop":
	default:
		_, _ = fmt.Fprintf(stderr, "gateway: -quota %q is not a quota mode; use watchdog or loop, or leave it empty for the executor's default\n", o.Quota)
		return 2
	}
	if o.Kubernetes.InstanceID != "" && o.Executor != "kubernetes" {
		_, _ = fmt.Fprintf(stderr, "gateway: -instance names a replica of the kubernetes executor; drop it or pass -executor kubernetes\n")
		return 2
	}
	o.Logger = hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.LevelFromString(*level), Output: stderr})
	if *demoOnly != "" && !*demo {
		_, _ = fmt.Fprintf(stderr, "gateway: -demo-assistant chooses the assistant of -demo; add -demo\n")
		return 2
	}
	if *demo && o.Addr == "127.0.0.1:8080" {
		o.Addr = "127.0.0.1:0"
	}
	g, err := Start(ctx, o)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 1
	}
	if *demo {
		err = runDemo(ctx, g, o, demoTargets(g.Config, *demoOnly), stdout)
	} else {
		<-ctx.Done()
		o.Logger.Info("shutting down")
	}
	err = errors.Join(err, g.Close())
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "gateway: %v\n", err)
		return 1
	}
	return 0
}

// defaultDataDir is $XDG_DATA_HOME/agentbox (~/.local/share/agentbox).
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "agentbox")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "agentbox")
	}
	return filepath.Join(os.TempDir(), "agentbox")
}
