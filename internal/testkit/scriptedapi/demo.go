package scriptedapi

import (
	"fmt"
	"path"
	"strings"
)

// DemoFile and DemoContent are what the Demo script's model writes.
const (
	DemoFile    = "hello.txt"
	DemoContent = "hello from the sandbox\n"
)

// Demo is the offline demo's model. Driven by the conversation state, it
// writes DemoFile into workdir with the Write tool, runs `cat` on it with
// Bash, then answers with text quoting what Bash printed. A tool that
// failed is reported in the answer instead of being retried.
func Demo(workdir string) Script {
	return func(req *Request) Turn {
		results := req.NewToolResults()
		if len(results) == 0 {
			return Turn{Blocks: []Block{
				Text("I'll write the file."),
				ToolUse("Write", map[string]string{"file_path": path.Join(workdir, DemoFile), "content": DemoContent}),
			}}
		}
		last := results[len(results)-1]
		switch {
		case last.IsError:
			return Say(fmt.Sprintf("The %s tool failed: %s", last.Name, strings.TrimSpace(last.Output())))
		case last.Name == "Write":
			return Call("Bash", map[string]string{"command": "cat " + DemoFile, "description": "Print " + DemoFile})
		default:
			return Say(fmt.Sprintf("Done. `cat %s` printed: %s", DemoFile, strings.TrimSpace(last.Output())))
		}
	}
}
