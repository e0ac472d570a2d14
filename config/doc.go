// Package config loads a gateway's assistants and connectors directories:
// assistants/<id>/package.yao (JSONC) with its sandbox block, prompts.yml,
// mcps/, src/index.ts|js and skills/<name>/SKILL.md, and
// connectors/**/<name>.conn.yao. Decoding is strict, every problem is
// reported at once with file:line:col, and defaults are applied in one place.
//
// Concurrency: loading is a pure function of the directory tree; the loaded
// values are immutable after Load returns and safe to share.
package config
