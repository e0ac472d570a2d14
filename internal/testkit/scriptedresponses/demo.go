package scriptedresponses

import (
	"fmt"
	"strings"
)

// DemoFile and DemoContent are what the Demo script's model writes.
const (
	DemoFile    = "hello.txt"
	DemoContent = "hello from the sandbox\n"
)

// Patch is an apply_patch input (the Codex CLI's freeform patch format)
// that adds file name with content.
func Patch(name, content string) string {
	var sb strings.Builder
	sb.WriteString("*** Begin Patch\n*** Add File: " + name + "\n")
	for _, l := range strings.SplitAfter(strings.TrimSuffix(content, "\n"), "\n") {
		sb.WriteString("+" + strings.TrimSuffix(l, "\n") + "\n")
	}
	sb.WriteString("*** End Patch\n")
	return sb.String()
}

// ApplyPatch is a custom tool call of the Codex CLI's apply_patch adding
// file name with content.
func ApplyPatch(name, content string) Call {
	return Call{Name: "apply_patch", Arguments: Patch(name, content), Custom: true}
}

// Shell is a function call of the Codex CLI's exec_command running cmd.
func Shell(cmd string) Call { return NewCall("exec_command", map[string]any{"cmd": cmd}) }

// Demo is the offline demo's model for the Codex CLI: it writes DemoFile
// with apply_patch, runs `cat` on it with exec_command, then answers
// quoting what the command printed. A tool that failed is reported in the
// answer instead of being retried.
func Demo() Script {
	return func(req *Request) Turn {
		results := req.NewToolResults()
		if len(results) == 0 {
			return Turn{Text: "I'll write the file.", Calls: []Call{ApplyPatch(DemoFile, DemoContent)}}
		}
		last := results[len(results)-1]
		switch last.Name {
		case "apply_patch":
			return Turn{Calls: []Call{Shell("cat " + DemoFile)}}
		default:
			return Say(fmt.Sprintf("Done. `cat %s` printed: %s", DemoFile, strings.TrimSpace(last.CommandOutput())))
		}
	}
}
