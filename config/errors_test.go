package config

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// baseTree is a valid gateway the error cases modify.
var baseTree = map[string]string{
	"connectors/deepseek/v3.conn.yao": `{
  "type": "anthropic",
  "options": {"model": "deepseek-chat", "key": "$ENV.DEEPSEEK_API_KEY"},
}`,
	"connectors/cursor.conn.yao": `{
  "type": "cursor",
  "options": {"model": "sonnet-4.5", "key": "$ENV.CURSOR_API_KEY"},
}`,
	"connectors/cursorless.conn.yao": `{
  "type": "cursor",
  "options": {"model": "sonnet-4.5"},
}`,
	"assistants/qa/package.yao": `{"name": "QA", "connector": "deepseek.v3"}`,
}

// coder writes assistants/coder/package.yao with the given sandbox block
// members (one per line, indented like a hand-written file).
func coder(connector string, sandbox ...string) map[string]string {
	var b strings.Builder
	b.WriteString("{\n  \"name\": \"Coder\",\n  \"connector\": \"" + connector + "\",\n  \"sandbox\": {\n")
	for _, line := range sandbox {
		b.WriteString("    " + line + ",\n")
	}
	b.WriteString("  },\n}\n")
	return map[string]string{"assistants/coder/package.yao": b.String()}
}

func with(sets ...map[string]string) map[string]string {
	out := maps.Clone(baseTree)
	for _, s := range sets {
		maps.Copy(out, s)
	}
	return out
}

func file(name, content string) map[string]string { return map[string]string{name: content} }

func TestLoadErrors(t *testing.T) {
	claude := `"command": "claude"`
	cursor := `"command": "cursor"`
	cases := map[string]struct {
		files   map[string]string
		opts    func(*LoadOptions)
		want    []string // substrings that must appear (beside the golden)
		wantErr bool
	}{
		"missing_assistants_dir": {files: map[string]string{"connectors/x.conn.yao": `{"type": "openai", "options": {"model": "m"}}`},
			want: []string{"assistants: cannot read the assistants directory"}, wantErr: true},
		"missing_package": {files: with(file("assistants/coder/prompts.yml", "- role: system\n  content: hi\n")),
			want: []string{"assistants/coder/package.yao: cannot read: no such file or directory"}, wantErr: true},
		"malformed_jsonc": {files: with(file("assistants/coder/package.yao", "{\n  \"name\": \"Coder\",,\n}\n")),
			want: []string{"package.yao:2:19: malformed JSONC"}, wantErr: true},
		"unclosed_comment": {files: with(file("assistants/coder/package.yao", "{\n  /* no end\n  \"name\": \"Coder\"\n}\n")),
			want: []string{"malformed JSONC"}, wantErr: true},
		"duplicate_key": {files: with(file("assistants/coder/package.yao", "{\n  \"connector\": \"deepseek.v3\",\n  \"connector\": \"cursor\"\n}\n")),
			want: []string{`package.yao:3:3: malformed JSONC: duplicate key "connector"`}, wantErr: true},
		"empty_package": {files: with(file("assistants/coder/package.yao", "")),
			want: []string{"assistants/coder/package.yao:1:1: malformed JSONC: parsing value: unexpected EOF"}, wantErr: true},
		"bom_is_fine": {files: with(file("assistants/coder/package.yao", "\xef\xbb\xbf{\"connector\": \"deepseek.v3\"}"))},
		"not_an_object": {files: with(file("assistants/coder/package.yao", "[1, 2]\n")),
			want: []string{": is an array, want an object"}, wantErr: true},
		"wrong_types": {files: with(coder("deepseek.v3", claude, `"max_cpu": "2"`, `"pids": 1.5`, `"timeout": 600`, `"max_memory": 4`, `"network": null`),
			file("assistants/other/package.yao", `{"name": 3, "connector": "deepseek.v3", "mcp": {"servers": {}}}`)),
			want: []string{`sandbox.max_cpu: "2" is a string, want a number`, "sandbox.pids: 1.5 is not an integer", `sandbox.timeout: 600 is a number, want a string; write a string, e.g. "10m"`, "name: 3 is a number, want a string", "mcp.servers: is an object, want an array"}, wantErr: true},
		"unknown_keys": {files: with(file("assistants/coder/package.yao", `{
  "name": "Coder",
  "conector": "deepseek.v3",
  "connector": "deepseek.v3",
  "sandbox": {
    "comand": "claude",
    "command": "claude",
    "max_mem": "4g",
    "colour": "blue",
  },
  "mcp": {"server": []},
}`)),
			want: []string{`conector: unknown key; did you mean "connector"?`, `sandbox.comand: unknown key; did you mean "command"?`, `sandbox.max_mem: unknown key; did you mean "max_memory"?`, "sandbox.colour: unknown key; remove it; known keys: arguments, budget, checkpoints, command,", `mcp.server: unknown key; did you mean "servers"?`}, wantErr: true},
		"memory": {files: with(coder("deepseek.v3", claude, `"max_memory": "4x"`),
			coderAs("zero", `"max_memory": "0"`), coderAs("negative", `"max_memory": "-1g"`), coderAs("tiny", `"max_memory": "1m"`), coderAs("huge", `"max_memory": "64g"`)),
			want: []string{`assistants/coder/package.yao:6:5: sandbox.max_memory: "4x" is not a size; use a number with k, m or g, e.g. "4g"`, `"0" is below the minimum`, `"-1g" is not a size`, `"1m" is below the minimum`, `warning: sandbox.max_memory: "64g" is more than the host's 8g of memory`}, wantErr: true},
		"disk": {files: with(coder("deepseek.v3", claude, `"max_disk": "2x"`),
			coderAs("zero", `"max_disk": "0"`), coderAs("negative", `"max_disk": "-1g"`), coderAs("tiny", `"max_disk": "1m"`),
			coderAs("inodes_zero", `"max_inodes": 0`), coderAs("inodes_negative", `"max_inodes": -1`), coderAs("inodes_float", `"max_inodes": 1.5`),
			coderAs("inodes_too_many", `"max_disk": "16m"`, `"max_inodes": 100000`)),
			want: []string{`assistants/coder/package.yao:6:5: sandbox.max_disk: "2x" is not a size; use a number with k, m or g, e.g. "2g"`, `"0" is below the minimum; use at least "16m"; a quota is never unlimited`, `"-1g" is not a size`, `"1m" is below the minimum`,
				"sandbox.max_inodes: 0 is out of range; a quota is never unlimited", "sandbox.max_inodes: -1 is out of range", "sandbox.max_inodes: ", "sandbox.max_inodes: 100000 files do not fit in max_disk 16m (a file takes at least 1 KiB); use at most 16384 or raise max_disk"}, wantErr: true},
		"disk_ok": {files: with(coder("deepseek.v3", claude, `"max_disk": "512m"`, `"max_inodes": 5000`), coderAs("small_disk", `"max_disk": "16m"`))},
		"cpu": {files: with(coder("deepseek.v3", claude, `"max_cpu": 0`), coderAs("negative", `"max_cpu": -1`), coderAs("above_host", `"max_cpu": 16`)),
			want: []string{"sandbox.max_cpu: 0 is not a CPU quota", "-1 is not a CPU quota", "16 is more than the host's 4 cores; use at most 4"}, wantErr: true},
		"cpu_unbounded_host": {files: with(coder("deepseek.v3", claude, `"max_cpu": 16`)), opts: func(o *LoadOptions) { o.HostCPUs = -1 }},
		"pids": {files: with(coder("deepseek.v3", claude, `"pids": 0`), coderAs("minus_one", `"pids": -1`), coderAs("huge", `"pids": 1000000`)),
			want: []string{"sandbox.pids: 0 is not a process limit; a limit is never unlimited", "-1 is not a process limit", "1000000 is out of range"}, wantErr: true},
		"timeouts": {files: with(coder("deepseek.v3", claude, `"timeout": "10 minutes"`), coderAs("zero", `"timeout": "0s"`), coderAs("negative", `"timeout": "-5m"`),
			coderAs("hook", `"timeout": "1m"`, `"hook_timeout": "2m"`), coderAs("stall", `"timeout": "1m"`, `"stall_timeout": "2m"`), coderAs("ttl", `"idle_ttl": "5m"`)),
			want: []string{`sandbox.timeout: "10 minutes" is not a duration`, `"0s" is out of range`, `"-5m" is out of range`, "sandbox.hook_timeout: 2m0s is longer than the sandbox timeout 1m0s", "warning: sandbox.stall_timeout: 2m0s is not shorter", `warning: sandbox.idle_ttl: has no effect with policy "request"`}, wantErr: true},
		"budget": {files: with(coder("deepseek.v3", claude, `"budget": {"calls": 0, "tokens": 5, "wall": "forever", "call": 3}`),
			coderAs("unlimited", `"budget": {"calls": -1, "tokens": 99999999999}`), coderAs("long_wall", `"timeout": "1m"`, `"budget": {"wall": "2m"}`),
			coderAs("types", `"budget": {"calls": "50", "tokens": 1.5}`), coderAs("not_object", `"budget": 50`)),
			want: []string{"sandbox.budget.calls: 0 is out of range; use a whole number from 1 to 100000 (a budget is never unlimited)",
				"sandbox.budget.tokens: 5 is out of range", `sandbox.budget.wall: "forever" is not a duration`, `sandbox.budget.call: unknown key; did you mean "calls"?`,
				"-1 is out of range", "99999999999 is out of range", "sandbox.budget.wall: 2m0s is longer than the sandbox timeout 1m0s",
				"sandbox.budget.calls:", "sandbox.budget.tokens: 1.5 is not an integer", "sandbox.budget:"}, wantErr: true},
		"unknown_command": {files: with(coder("deepseek.v3", `"command": "claud"`), coderAs("gemini", `"command": "gemini"`), coderAs("none")),
			want: []string{`sandbox.command: unknown value "claud"; did you mean "claude"? (use "claude", "codex" or "cursor")`, `unknown value "gemini"; use "claude", "codex" or "cursor"`, `sandbox.command: missing; add "command": "claude", "codex" or "cursor"`}, wantErr: true},
		"container_settings": {files: with(coder("deepseek.v3", claude, `"network": "host"`, `"user": "0:0"`, `"runtime": "kata"`, `"image": "http://x/y"`), coderAs("names", `"user": "agent"`, `"network": "my net"`, `"policy": "forever"`)),
			want: []string{`sandbox.network: "host" would share another network stack`, `sandbox.user: "0:0" runs the agent as root`, `sandbox.runtime: unknown value "kata"`, `sandbox.image: "http://x/y" is not an image reference`, `"agent" is not a uid:gid`, `"my net" is not a network name`, `unknown value "forever"`}, wantErr: true},
		"claude_arguments": {files: with(coder("deepseek.v3", claude, `"arguments": {"max_turns": 0, "max_retries": 9, "permission_mode": "yolo", "allowed_tools": "Read", "force": true, "append_system_prompt": "be nice", "max_turn": 3}`)),
			want: []string{"sandbox.arguments.max_turns: 0 is out of range; use a whole number from 1 to 1000", "sandbox.arguments.max_retries: 9 is out of range; use a whole number from 0 to 5", `sandbox.arguments.permission_mode: unknown value "yolo"`, `sandbox.arguments.allowed_tools: "Read" is a string, want an array of strings`, "sandbox.arguments.force: force is a cursor-only argument", "sandbox.arguments.append_system_prompt: not an argument of claude; put the instructions in prompts.yml", `sandbox.arguments.max_turn: unknown argument of claude; did you mean "max_turns"?`}, wantErr: true},
		"cursor_without_network": {files: with(coder("cursor", cursor), coderAs("explicit_none", cursor, `"network": "none"`)),
			want: []string{`assistants/coder/package.yao:5:5: sandbox.network: a cursor sandbox cannot run with network "none": cursor-agent cannot use a local model endpoint`, `assistants/coder_explicit_none/package.yao:6:5: sandbox.network`}, wantErr: true},
		"cursor_bad_network": {files: with(coder("cursor", cursor, `"network": "host"`)),
			want: []string{`sandbox.network: "host" would share another network stack`}, wantErr: true},
		"cursor_without_key": {files: with(coder("cursorless", cursor, `"network": "bridge"`)),
			want: []string{`connector: connector "cursorless" has no key: cursor-agent authenticates to Cursor with the connector's key (CURSOR_API_KEY); add "key": "$ENV.CURSOR_API_KEY" to the options of connectors/cursorless.conn.yao`}, wantErr: true},
		"cursor_with_claude_args": {files: with(coder("cursor", cursor, `"network": "bridge"`, `"arguments": {"max_turns": 5, "permission_mode": "plan", "allowed_tools": ["Read"], "disallowed_tools": [], "forse": true}`)),
			want: []string{"sandbox.arguments.max_turns: max_turns is a claude-only argument; remove it; cursor has no equivalent", "permission_mode is a claude-only argument", "allowed_tools is a claude-only argument", "disallowed_tools is a claude-only argument", `forse: unknown argument of cursor; did you mean "force"?`}, wantErr: true},
		"cursor_with_anthropic_connector": {files: with(coder("deepseek.v3", cursor, `"network": "bridge"`)),
			want: []string{`connector: connector "deepseek.v3" is of type "anthropic", which cursor cannot use; use a connector of type "cursor"`}, wantErr: true},
		"egress_bad_entries": {files: with(coder("deepseek.v3", claude, `"egress": ["https://registry.npmjs.org", "Example.com", "a.*.example.com", "*.com", "x.test:0", 3, {"host": "*.corp.test", "private": true}, {"private": true}, {"host": "pkgs.test", "secret": {"env": "$ENV.T"}}, {"host": "pkgs.test", "secret": {"env": "s3cr3t value", "header": "Bad Header"}}, {"host": "pkgs.test", "secret": {}}, {"host": "pkgs.test", "port": 80}]`)),
			want: []string{`sandbox.egress[0]: "https://registry.npmjs.org" is a URL, not a host`, `sandbox.egress[1]: "Example.com" is not lower case; write it in lower case: "example.com"`, `sandbox.egress[2]: "a.*.example.com" is not a host pattern`, `sandbox.egress[3]: "*.com" allows a whole top-level domain`, `sandbox.egress[4]: "x.test:0" has no valid port`, "sandbox.egress[5]: 3 is a number", "sandbox.egress[6].private: private addresses can only be allowed for an exact host name", "sandbox.egress[7].host: missing", `sandbox.egress[8].secret.env: "$ENV.T": env takes a variable name; write the variable's name alone: "T"`, `sandbox.egress[9].secret.env: "s3cr3t value" is not a variable name`, `sandbox.egress[9].secret.header: "Bad Header" is not a header name`, "sandbox.egress[10].secret.env: missing", `sandbox.egress[11].port: unknown key`}, wantErr: true},
		"egress_with_network": {files: with(coder("deepseek.v3", claude, `"network": "bridge"`, `"egress": ["registry.npmjs.org"]`)),
			want: []string{`sandbox.egress: has no effect with network "bridge"`}, wantErr: true},
		"egress_secret_warnings": {files: with(coder("deepseek.v3", claude, `"egress": ["registry.npmjs.org", {"host": "npm.pkg.github.com:443", "secret": {"env": "GH_PKG_TOKEN"}}]`)),
			want: []string{"warning: sandbox.egress[1].secret.env: $GH_PKG_TOKEN is not set", "warning: sandbox.egress[1].secret: may have no effect on port 443"}},
		"cursor_with_egress": {files: with(coder("cursor", cursor, `"egress": ["*.cursor.sh"]`))},
		"cursor_ok":          {files: with(coder("cursor", cursor, `"network": "bridge"`, `"arguments": {"force": true, "model": "gpt-5"}`))},
		"connector_unknown": {files: with(coder("deepseek.v4", claude), file("assistants/other/package.yao", `{"connector": "openai.gpt"}`), file("assistants/none/package.yao", `{"name": "x"}`)),
			want: []string{`connector: unknown connector "deepseek.v4"; did you mean "deepseek.v3"?`, `unknown connector "openai.gpt"; create connectors/openai/gpt.conn.yao or use one of "cursor", "cursorless" or "deepseek.v3"`, "connector: missing"}, wantErr: true},
		"connector_env_unset": {files: with(file("connectors/deepseek/v3.conn.yao", `{
  "type": "anthropic",
  "options": {
    "model": "deepseek-chat",
    "key": "$ENV.DEEPSEEK_KEY_TYPO",
  },
}`)),
			want: []string{"connectors/deepseek/v3.conn.yao:5:5: options.key: environment variable DEEPSEEK_KEY_TYPO is not set; export DEEPSEEK_KEY_TYPO in the gateway's environment, or write the value in the file"}, wantErr: true},
		"connector_duplicate_id": {files: with(file("connectors/deepseek.v3.conn.yao", `{"type": "openai", "options": {"model": "m"}}`)),
			want: []string{`connectors/deepseek/v3.conn.yao: connector id "deepseek.v3" is also defined by connectors/deepseek.v3.conn.yao`}, wantErr: true},
		"connector_env_empty": {files: with(file("connectors/deepseek/v3.conn.yao", `{"type": "anthropic", "options": {"model": "m", "key": "$ENV.EMPTY"}}`)),
			opts: func(o *LoadOptions) { o.LookupEnv = env(map[string]string{"EMPTY": "", "CURSOR_API_KEY": "k"}) },
			want: []string{"environment variable EMPTY is empty"}, wantErr: true},
		"connector_fields": {files: with(file("connectors/bad.conn.yao", `{
  "type": "gemini",
  "options": {"host": "api.example.com", "key": "$ENV.bad-name", "temperature": 1},
}`), file("connectors/noopts.conn.yao", `{"type": "openai"}`)),
			want: []string{`type: unknown value "gemini"`, `options.host: "api.example.com" is not a URL`, `options.key: "$ENV.bad-name" is not a valid environment reference`, "options.temperature: unknown key", "options.model: missing", "connectors/noopts.conn.yao:1:1: options: missing"}, wantErr: true},
		"mcp": {files: with(file("assistants/coder/package.yao", `{
  "connector": "deepseek.v3",
  "mcp": {"servers": [
    {"server_id": "filesystm", "tools": ["read_file"]},
    {"server_id": "filesystem", "tools": ["read file", 3]},
    {"server_id": "filesystem"},
    {"tools": []},
    {"server_id": "../etc"},
  ]},
}`), file("assistants/coder/mcps/filesystem.mcp.yao", `{"transport": "stdio", "command": "npx", "url": "http://x", "env": {"TOKEN": "$ENV.FS_TOKEN"}}`),
			file("assistants/coder/mcps/web.mcp.yao", `{"transport": "websocket"}`), file("assistants/coder/mcps/a__b.mcp.yao", `{}`),
			file("assistants/coder/mcps/http.mcp.yao", `{"transport": "http"}`),
			file("assistants/coder/mcps/gw.mcp.yao", `{"transport": "gateway", "command": "gw-server"}`)),
			want: []string{`command: not used by transport "gateway"`, `mcp.servers[0].server_id: no MCP server "filesystm" in mcps/; did you mean "filesystem"?`, `mcp.servers[1].tools[0]: "read file" is not a tool name`, "mcp.servers[1].tools[1]: 3 is a number, want a string", `mcp.servers[2].server_id: server "filesystem" is listed twice`, "mcp.servers[3].server_id: missing", `mcp.servers[4].server_id: "../etc" is not a valid MCP server id`, `url: not used by transport "stdio"`, "env.TOKEN: environment variable FS_TOKEN is not set", `transport: unknown value "websocket"`, `"a__b" is not a valid MCP server id`, `url: missing for transport "http"`}, wantErr: true},
		"prompts": {files: with(coder("deepseek.v3", claude), file("assistants/coder/prompts.yml", "- role: system\n  content: ok\n- role: systm\n  content: x\n- role: user\n- content: [1]\n  role: user\n  extra: 1\n")),
			want: []string{`assistants/coder/prompts.yml:3:3: [1].role: unknown value "systm"; did you mean "system"?`, "[2].content: missing", "[3].content: is an array, want a string", `[3].extra: unknown key`}, wantErr: true},
		"prompts_malformed": {files: with(coder("deepseek.v3", claude), file("assistants/coder/prompts.yml", "- role: system\n  content: \"unclosed\n")),
			want: []string{"assistants/coder/prompts.yml:2:12: malformed YAML"}, wantErr: true},
		"prompts_not_a_list": {files: with(coder("deepseek.v3", claude), file("assistants/coder/prompts.yml", "role: system\ncontent: hi\n")),
			want: []string{": is an object, want a list of messages"}, wantErr: true},
		"hooks_both": {files: with(coder("deepseek.v3", claude), file("assistants/coder/src/index.ts", "export {}"), file("assistants/coder/src/index.js", "")),
			want: []string{"assistants/coder/src: both index.ts and index.js exist; keep one"}, wantErr: true},
		"skills_never_fail": {files: with(coder("deepseek.v3", claude),
			file("assistants/coder/skills/ok/SKILL.md", "---\nname: ok\ndescription: fine\n---\n"),
			file("assistants/coder/skills/nodesc/SKILL.md", "---\nname: nodesc\n---\n"),
			file("assistants/coder/skills/emptydesc/SKILL.md", "---\nname: emptydesc\ndescription: \"\"\n---\n"),
			file("assistants/coder/skills/nofile/README.md", "x"),
			file("assistants/coder/skills/Bad_Name/SKILL.md", "---\nname: Bad_Name\ndescription: x\n---\n"),
			file("assistants/coder/skills/noname/SKILL.md", "---\ndescription: x\ndescriptio: y\nmodel: haiku\n---\n"),
			file("assistants/coder/skills/broken/SKILL.md", "---\nname: broken\ndescription: [unclosed\n---\n"),
			file("assistants/coder/skills/unterminated/SKILL.md", "---\nname: unterminated\ndescription: x\n"),
			file("assistants/coder/skills/meta/SKILL.md", "---\nname: meta\ndescription: x\nmetadata:\n  version: 1.0\n  tags: [a]\ncompatibility: "+strings.Repeat("c", 501)+"\n---\n"),
			file("assistants/coder/skills/README.md", "x")),
			want: []string{"nodesc/SKILL.md:2:1: description: skill excluded: description is missing", "emptydesc/SKILL.md:3:1: description: skill excluded: description is empty", "nofile: skill excluded: no SKILL.md", `warning: name: "Bad_Name" breaks the Agent Skills naming rule`, "noname/SKILL.md:2:1: warning: name: missing; the directory name is used", `warning: descriptio: unknown field; did you mean "description"?`, "broken/SKILL.md:3:14: skill excluded: malformed front matter", "unterminated/SKILL.md: skill excluded: no YAML front matter", "warning: metadata.version: the standard wants a string here", "warning: compatibility: 501 characters", "skills/README.md: warning: not a skill directory; ignored"}},
		"all_at_once": {files: with(file("assistants/coder/package.yao", `// every class at once: Load reports them all
{
  "connector": "deepseek.v9",
  "sandbox": {
    "command": "claude",
    "max_memory": "4x",
    "max_cpu": -2,
    "pids": -1,
    "timeout": "soon",
    "user": "0:0",
    "arguments": {"max_turns": "20"},
  },
  "extra": true,
}`), file("connectors/broken.conn.yao", `{"type": "openai" "options": {}}`)),
			want: []string{"connectors/broken.conn.yao:1:19: malformed JSONC", "connector: unknown connector", "sandbox.max_memory", "sandbox.max_cpu", "sandbox.pids", "sandbox.timeout", "sandbox.user", "sandbox.arguments.max_turns", "extra: unknown key"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := writeTree(t, tc.files)
			opts := testOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			g, err := Load(root, opts)
			if tc.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrInvalid)
				assert.Nil(t, g)
			} else {
				require.NoError(t, err)
			}
			got := render(g, err)
			for _, w := range tc.want {
				assert.Contains(t, got, w)
			}
			golden(t, "errors/"+name+".golden", got)
		})
	}
}

// coderAs is coder() under assistants/coder_<suffix>, so several bad
// sandboxes can be reported by one Load.
func coderAs(suffix string, sandbox ...string) map[string]string {
	if len(sandbox) == 0 {
		sandbox = []string{`"image": "x"`}
	} else if !strings.Contains(strings.Join(sandbox, ""), `"command"`) {
		sandbox = append([]string{`"command": "claude"`}, sandbox...)
	}
	m := coder("deepseek.v3", sandbox...)
	return map[string]string{"assistants/coder_" + suffix + "/package.yao": m["assistants/coder/package.yao"]}
}

func TestErrorFormatting(t *testing.T) {
	p := Problem{File: "assistants/coder/package.yao", Line: 12, Col: 5, Path: "sandbox.max_memory",
		Message: `"4x" is not a size`, Hint: `use a number with k, m or g, e.g. "4g"`, Severity: SeverityError}
	assert.Equal(t, `assistants/coder/package.yao:12:5: sandbox.max_memory: "4x" is not a size; use a number with k, m or g, e.g. "4g"`, p.Error())
	w := Problem{File: "a/SKILL.md", Message: "m", Severity: SeverityWarning}
	assert.Equal(t, "a/SKILL.md: warning: m", w.Error())

	e := &Error{Problems: []Problem{p, w}}
	assert.True(t, errors.Is(e, ErrInvalid))
	assert.Len(t, e.Errors(), 1)
	assert.Equal(t, "invalid configuration: 1 error(s)\n  "+p.Error()+"\n  "+w.Error(), e.Error())
}
