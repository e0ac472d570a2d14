// Command agentbox-config checks a gateway directory the way the gateway
// loads it and prints every problem as file:line:col: path: message; hint.
//
//	agentbox-config [-json] [dir]
//
// It exits 1 when the configuration has errors, 2 on bad usage, and 0
// otherwise (warnings and excluded skills are printed but do not fail).
// With -json it prints the loaded assistants and connectors (keys
// redacted).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentbox/agentbox/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentbox-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the loaded configuration as JSON")
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: agentbox-config [-json] [dir]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	dir := "."
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	g, err := config.Load(dir, config.LoadOptions{})
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		for _, p := range ce.Problems {
			_, _ = fmt.Fprintln(stderr, p.Error())
		}
		_, _ = fmt.Fprintf(stderr, "%d error(s)\n", len(ce.Errors()))
		return 1
	case err != nil:
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	for _, p := range g.Problems {
		_, _ = fmt.Fprintln(stderr, p.Error())
	}
	if *asJSON {
		b, err := json.MarshalIndent(map[string]any{"assistants": g.Assistants, "connectors": g.Connectors}, "", "  ")
		if err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 1
		}
		_, _ = fmt.Fprintln(stdout, string(b))
		return 0
	}
	_, _ = fmt.Fprintf(stdout, "ok: %d assistant(s), %d connector(s), %d warning(s)\n", len(g.Assistants), len(g.Connectors), len(g.Problems))
	return 0
}
