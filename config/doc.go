// Package config loads a gateway's assistants and connectors directories:
// assistants/<id>/package.yao (JSONC) with its sandbox block, prompts.yml,
// mcps/<server_id>.mcp.yao, src/index.ts|js and skills/<name>/SKILL.md,
// and connectors/**/<name>.conn.yao. REFERENCE.md, generated from the
// option tables in this package, documents every key.
//
// Decoding is strict (an unknown key is an error, with "did you mean"),
// and Load reports every problem at once as a *Error whose Problems carry
// file:line:col, the key path and a hint. Skill problems never fail Load:
// they are listed in Gateway.Problems, and a skill Claude Code would
// refuse is left out. Defaults are applied in one place (applyDefaults)
// and are visible in the loaded Sandbox.
//
// Entry points: Load and LoadAssistant; Sandbox.Spec and
// Sandbox.ConfigHash for the executor; Assistant.MCPConfig (with
// HelperRelay), Assistant.MCPAllowedTools, Assistant.SystemPrompt and
// Assistant.SkillFiles (regular files only, bounded) for the runners and
// the workspace. Connector keys are Secrets that print redacted.
//
// config imports the standard library, the JSONC and YAML libraries and
// executor (a leaf of the standard library alone) for Spec and the one set
// of defaults the backends share.
//
// Concurrency: loading is a pure function of the directory tree and
// LoadOptions; it starts no goroutines. The loaded values are not mutated
// after Load returns and are safe to read from many goroutines.
package config
