// Command standin plays cursor-agent for end-to-end tests that cannot reach
// Cursor's service: it accepts the CLI's headless command line, insists on
// what the real CLI needs to run unattended (print mode, stream-json, a
// trusted workspace, CURSOR_API_KEY, a prompt on stdin), then replays the
// transcript named by $CURSOR_STANDIN_TRANSCRIPT line by line to stdout and
// performs the file writes the transcript claims, so the workspace ends up
// as the recorded run left it. The user event carries the prompt it was
// actually given. A transcript without a result line makes it exit 1, as
// the real CLI does when a run fails.
//
// It is built by the cursor package's tests (CGO_ENABLED=0, static) and
// copied into the sandbox; it is not shipped.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cursor-agent (stand-in):", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("cursor-agent", flag.ContinueOnError)
	printMode := fs.Bool("p", false, "print mode")
	format := fs.String("output-format", "text", "output format")
	fs.Bool("stream-partial-output", false, "stream deltas")
	fs.Bool("force", false, "allow commands")
	trust := fs.Bool("trust", false, "trust the workspace")
	workspace := fs.String("workspace", "", "workspace")
	fs.String("model", "", "model")
	fs.Bool("approve-mcps", false, "approve MCP servers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case !*printMode:
		return fmt.Errorf("only print mode (-p) is supported")
	case *format != "stream-json":
		return fmt.Errorf("--output-format %q: only stream-json is supported", *format)
	case !*trust:
		return fmt.Errorf("workspace is not trusted; pass --trust in headless mode")
	case fs.NArg() > 0:
		return fmt.Errorf("expected the prompt on stdin, got %d positional arguments", fs.NArg())
	case os.Getenv("CURSOR_API_KEY") == "":
		return fmt.Errorf("not authenticated: set CURSOR_API_KEY")
	}
	ws, err := filepath.Abs(*workspace)
	if err != nil || *workspace == "" {
		return fmt.Errorf("--workspace is required")
	}
	prompt, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(prompt)) == "" {
		return fmt.Errorf("no prompt on stdin")
	}
	f, err := os.Open(os.Getenv("CURSOR_STANDIN_TRANSCRIPT"))
	if err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	return replay(f, stdout, ws, string(prompt))
}

// replay copies the transcript to out, substituting the prompt and
// performing completed writes.
func replay(in io.Reader, out io.Writer, ws, prompt string) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	sawResult := false
	for sc.Scan() {
		line := sc.Bytes()
		var ev struct {
			Type     string `json:"type"`
			Subtype  string `json:"subtype"`
			ToolCall struct {
				Write *struct {
					Args struct {
						Path     string `json:"path"`
						FileText string `json:"fileText"`
					} `json:"args"`
					Result *struct {
						Success json.RawMessage `json:"success"`
					} `json:"result"`
				} `json:"writeToolCall"`
			} `json:"tool_call"`
		}
		if json.Unmarshal(line, &ev) == nil {
			switch {
			case ev.Type == "user":
				line = userEvent(line, prompt)
			case ev.Type == "result":
				sawResult = true
			case ev.Type == "tool_call" && ev.Subtype == "completed" && ev.ToolCall.Write != nil &&
				ev.ToolCall.Write.Result != nil && ev.ToolCall.Write.Result.Success != nil:
				if err := write(ws, ev.ToolCall.Write.Args.Path, ev.ToolCall.Write.Args.FileText); err != nil {
					return err
				}
			}
		}
		if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !sawResult {
		return fmt.Errorf("run failed")
	}
	return nil
}

// userEvent replaces the echoed prompt with the one actually received.
func userEvent(line []byte, prompt string) []byte {
	var ev map[string]any
	if json.Unmarshal(line, &ev) != nil {
		return line
	}
	ev["message"] = map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}}
	out, err := json.Marshal(ev)
	if err != nil {
		return line
	}
	return out
}

// write creates a file the transcript says the agent wrote; it must be in
// the workspace.
func write(ws, path, text string) error {
	if !filepath.IsAbs(path) {
		path = filepath.Join(ws, path)
	}
	path = filepath.Clean(path)
	if path != ws && !strings.HasPrefix(path, ws+string(filepath.Separator)) {
		return fmt.Errorf("write outside the workspace: %s", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
