package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSkillFiles(t *testing.T) {
	a, err := LoadAssistant("testdata/gateway", "coder", testOptions())
	require.NoError(t, err)
	files, err := a.SkillFiles(".claude/skills")
	require.NoError(t, err)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	assert.Equal(t, []string{
		".claude/skills/code-review/SKILL.md",
		".claude/skills/code-review/references/checklist.md",
		".claude/skills/code-review/scripts/lint.sh",
		".claude/skills/deploy/SKILL.md",
		".claude/skills/deploy/scripts/deploy.sh",
		".claude/skills/long-description/SKILL.md",
	}, names, "excluded skills are not copied")
	want, err := os.ReadFile("testdata/gateway/assistants/coder/skills/deploy/scripts/deploy.sh")
	require.NoError(t, err)
	assert.Equal(t, want, files[".claude/skills/deploy/scripts/deploy.sh"])
}

func TestSkillSymlinksNotCopied(t *testing.T) {
	root := writeTree(t, with(coder("deepseek.v3", `"command": "claude"`),
		file("assistants/coder/skills/s/SKILL.md", "---\nname: s\ndescription: d\n---\n"),
		file("secret.txt", "host secret")))
	require.NoError(t, os.Symlink(filepath.Join(root, "secret.txt"), filepath.Join(root, "assistants/coder/skills/s/leak.txt")))

	g, err := Load(root, testOptions())
	require.NoError(t, err)
	assert.Contains(t, render(g, nil), "assistants/coder/skills/s/leak.txt: warning: not a regular file (symlink or special file); it is not copied into the sandbox")
	files, err := g.Assistants["coder"].SkillFiles(".claude/skills")
	require.NoError(t, err)
	assert.Len(t, files, 1)
	for name, content := range files {
		assert.NotContains(t, string(content), "host secret", name)
	}
}

func TestSkillFilesBounded(t *testing.T) {
	tree := with(coder("deepseek.v3", `"command": "claude"`), file("assistants/coder/skills/big/SKILL.md", "---\nname: big\ndescription: d\n---\n"))
	for i := range maxSkillFiles {
		tree[fmt.Sprintf("assistants/coder/skills/big/assets/%04d.txt", i)] = "x"
	}
	a, err := LoadAssistant(writeTree(t, tree), "coder", testOptions())
	require.NoError(t, err)
	_, err = a.SkillFiles(".claude/skills")
	require.ErrorIs(t, err, ErrSkillsTooLarge)
	assert.Contains(t, err.Error(), "trim skills/")
}
