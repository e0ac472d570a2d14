package scriptedopenai

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

// Demo is the offline demo's model as an OpenAI provider: it writes
// DemoFile into workdir with Write, runs `cat` on it with Bash, then
// answers quoting what Bash printed.
func Demo(workdir string) Script {
	return func(req *Request) Turn {
		results := req.NewToolResults()
		if len(results) == 0 {
			return Turn{Text: "I'll write the file.", Calls: []Call{NewCall("Write", map[string]string{"file_path": path.Join(workdir, DemoFile), "content": DemoContent})}}
		}
		last := results[len(results)-1]
		switch last.Name {
		case "Write":
			return CallTool("Bash", map[string]string{"command": "cat " + DemoFile, "description": "Print " + DemoFile})
		default:
			return Say(fmt.Sprintf("Done. `cat %s` printed: %s", DemoFile, strings.TrimSpace(last.Content)))
		}
	}
}
