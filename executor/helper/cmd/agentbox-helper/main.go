// Command agentbox-helper is the in-container side of agentbox: the
// container's main process (under Docker's Init), serving exec on
// /run/agentbox/exec.sock, relaying the model port and MCP to the host, and
// exiting at the sandbox deadline. It is a static binary that runs on a bare
// busybox image; see package github.com/agentbox/agentbox/executor/helper.
//
// Usage:
//
//	agentbox-helper serve [--dir /run/agentbox] [--workdir /workspace]
//	                      [--deadline RFC3339] [--model-port N] [--egress-port N]
//	                      [--exec-port N [--reverse]] [--kill-grace 500ms] [--debug]
//	agentbox-helper mcp --server <id> [--dir /run/agentbox]
//	agentbox-helper checkpoint run|wait
//	agentbox-helper version
//
// checkpoint run reads a helper.CheckpointRequest (JSON) on stdin and
// writes its helper.CheckpointResponse on stdout; checkpoint wait idles
// until SIGTERM, as the main process of a pod that runs it by exec.
//
// The mcp relay reads its token from AGENTBOX_TOKEN, else from
// /run/agentbox/token.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor/helper"
)

func main() {
	args := os.Args[1:]
	// Installed as abx (a link), the binary is the agent's tools CLI.
	if filepath.Base(os.Args[0]) == helper.ToolsCommand {
		args = append([]string{"tools"}, args...)
	}
	os.Exit(run(args, os.Stdin, os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	_, _ = fmt.Fprintln(w, "usage: agentbox-helper serve|mcp|tools|checkpoint|version [flags]; see `agentbox-helper serve -h`, `agentbox-helper tools -h`")
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch args[0] {
	case "tools":
		return helper.RunTools(ctx, args[1:], stdout, stderr, helper.ToolsOptions{})
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "mcp":
		return mcp(ctx, args[1:], stdin, stdout, stderr)
	case "checkpoint":
		return checkpointCmd(ctx, args[1:], stdin, stdout, stderr)
	case "version":
		_, _ = fmt.Fprintf(stdout, "agentbox-helper protocol %d\n", helper.ProtocolVersion)
		return 0
	default:
		usage(stderr)
		return 2
	}
}

func serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o helper.ServerOptions
	var deadline string
	var debug bool
	fs.StringVar(&o.Dir, "dir", helper.ContainerDir, "per-sandbox directory shared with the host")
	fs.StringVar(&o.Workdir, "workdir", "/workspace", "working directory of commands that name none")
	fs.StringVar(&deadline, "deadline", "", "RFC3339 time at which every command is killed and the helper exits")
	fs.IntVar(&o.ModelPort, "model-port", 0, "loopback TCP port relayed to <dir>/model.sock (0: off)")
	fs.IntVar(&o.EgressPort, "egress-port", 0, "loopback TCP port relayed to <dir>/egress.sock, the agent's HTTP_PROXY (0: off)")
	fs.IntVar(&o.ExecPort, "exec-port", 0, "also serve exec and files on this loopback TCP port, for a host behind a port forward (0: off)")
	fs.BoolVar(&o.Reverse, "reverse", false, "relay model, egress and MCP traffic over connections the host parks on --exec-port, for a host that shares no directory")
	fs.DurationVar(&o.KillGrace, "kill-grace", helper.DefaultKillGrace, "SIGTERM to SIGKILL delay for cancelled commands")
	fs.BoolVar(&debug, "debug", false, "log to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if deadline != "" {
		t, err := time.Parse(time.RFC3339Nano, deadline)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "agentbox-helper: --deadline %q: %v; use RFC3339, e.g. 2026-01-02T15:04:05Z\n", deadline, err)
			return 2
		}
		o.Deadline = t
	}
	if debug {
		o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	err := helper.NewServer(o).Run(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, helper.ErrDeadline):
		_, _ = fmt.Fprintln(stderr, "agentbox-helper: sandbox deadline reached; exiting")
		return 0
	default:
		_, _ = fmt.Fprintf(stderr, "agentbox-helper: %v\n", err)
		return 1
	}
}

func mcp(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := helper.MCPRelayOptions{Stdin: stdin, Stdout: stdout}
	fs.StringVar(&o.Server, "server", "", "MCP server id (the name in .mcp.json)")
	fs.StringVar(&o.Dir, "dir", helper.ContainerDir, "per-sandbox directory shared with the host")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := helper.RunMCPRelay(ctx, o); err != nil {
		_, _ = fmt.Fprintf(stderr, "agentbox-helper mcp: %v\n", err)
		return 1
	}
	return 0
}

// checkpointCmd is `checkpoint run` (one request on stdin, its response
// on stdout) or `checkpoint wait` (idle until SIGTERM).
func checkpointCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && args[0] == "run":
		if err := helper.RunCheckpoint(ctx, stdin, stdout); err != nil {
			_, _ = fmt.Fprintf(stderr, "agentbox-helper: %v\n", err)
			return 1
		}
		return 0
	case len(args) == 1 && args[0] == "wait":
		<-ctx.Done()
		return 0
	}
	_, _ = fmt.Fprintln(stderr, "usage: agentbox-helper checkpoint run|wait")
	return 2
}
