package agentbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox"
)

// A gateway directory with a mistake: New refuses it before anything
// starts (no Docker needed to see it) and names the file, the line, the
// key and the fix, every problem at once.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "agentbox-example")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	coder := filepath.Join(dir, "assistants", "coder")
	_ = os.MkdirAll(coder, 0o755)
	_ = os.WriteFile(filepath.Join(coder, "package.yao"), []byte(`{
  "name": "Coder",
  "sandbox": {"command": "claude", "image": "agentbox/sandbox-claude:latest", "max_memory": "4x"}
}`), 0o644)

	_, err = agentbox.New(context.Background(), agentbox.Options{Dir: dir, DataDir: filepath.Join(dir, "data")})
	fmt.Println(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""))
	// Output:
	// invalid configuration: 2 error(s)
	//   assistants/coder/package.yao:1:1: connector: missing; add "connector" naming a file in connectors/, e.g. "deepseek.v3" for connectors/deepseek/v3.conn.yao
	//   assistants/coder/package.yao:3:79: sandbox.max_memory: "4x" is not a size; use a number with k, m or g, e.g. "4g"
}
