package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/config"
)

// lookup stands in for the process environment.
func lookup(name string) (string, bool) {
	v, ok := map[string]string{
		"DEEPSEEK_API_KEY":  "sk-deepseek",
		"ANTHROPIC_API_KEY": "sk-ant",
		"CURSOR_API_KEY":    "cur-key",
		"SEARCH_TOKEN":      "Bearer search",
	}[name]
	return v, ok
}

func ExampleLoad() {
	g, err := config.Load("testdata/gateway", config.LoadOptions{LookupEnv: lookup, HostCPUs: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	coder := g.Assistants["coder"]
	spec := coder.Sandbox.Spec()
	fmt.Println(coder.Sandbox.Command, spec.Image, spec.MemoryBytes>>30, "GiB", spec.Network, spec.User)
	fmt.Println("plain assistant:", g.Assistants["qa"].Sandbox == nil)
	fmt.Println("connector:", coder.Connector.ID, coder.Connector.Model, coder.Connector.Key)
	fmt.Println("skills:", len(coder.Skills), "allowed:", coder.MCPAllowedTools()[0])
	// Output:
	// claude agentbox/sandbox-claude:latest 4 GiB none 100000:100000
	// plain assistant: true
	// connector: deepseek.v3 deepseek-chat [redacted]
	// skills: 3 allowed: mcp__filesystem__read_file
}

func ExampleLoad_problems() {
	dir, _ := os.MkdirTemp("", "agentbox-config")
	defer func() { _ = os.RemoveAll(dir) }()
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		_ = os.WriteFile(p, []byte(content), 0o644)
	}
	write("connectors/deepseek/v3.conn.yao", `{"type": "anthropic", "options": {"model": "deepseek-chat", "key": "$ENV.NOT_SET"}}`)
	write("assistants/coder/package.yao", `{
  "connector": "deepseek.v3",
  "sandbox": {
    "command": "claude",
    "max_memory": "4x",
    "pids": 0,
  },
}`)
	_, err := config.Load(dir, config.LoadOptions{LookupEnv: lookup})
	var ce *config.Error
	if errors.As(err, &ce) {
		for _, p := range ce.Problems {
			fmt.Println(p)
		}
	}
	// Output:
	// assistants/coder/package.yao:5:5: sandbox.max_memory: "4x" is not a size; use a number with k, m or g, e.g. "4g"
	// assistants/coder/package.yao:6:5: sandbox.pids: 0 is not a process limit; a limit is never unlimited; use a number from 32 to 65536, e.g. 256
	// connectors/deepseek/v3.conn.yao:1:61: options.key: environment variable NOT_SET is not set; export NOT_SET in the gateway's environment, or write the value in the file
}

func ExampleAssistant_MCPConfig() {
	a, err := config.LoadAssistant("testdata/gateway", "coder", config.LoadOptions{LookupEnv: lookup, HostCPUs: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := a.MCPConfig(config.HelperRelay)
	fmt.Println(string(b))
	// Output:
	// {
	//   "mcpServers": {
	//     "filesystem": {
	//       "command": "agentbox-helper",
	//       "args": [
	//         "mcp",
	//         "--server",
	//         "filesystem"
	//       ]
	//     },
	//     "search": {
	//       "command": "agentbox-helper",
	//       "args": [
	//         "mcp",
	//         "--server",
	//         "search"
	//       ]
	//     }
	//   }
	// }
}
