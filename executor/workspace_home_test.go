package executor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbox/agentbox/executor"
)

// TestPlaceHomeFilesRefuses checks the names and directories refused
// before anything runs in the container (the sandbox is never used).
func TestPlaceHomeFilesRefuses(t *testing.T) {
	ctx := context.Background()
	one := map[string][]byte{".claude/skills/x/SKILL.md": []byte("x")}
	tests := map[string]struct {
		dir   string
		files map[string][]byte
	}{
		"relative dir":       {dir: "home", files: one},
		"root dir":           {dir: "/", files: one},
		"absolute name":      {dir: "/home/agent", files: map[string][]byte{"/etc/x": nil}},
		"climbing name":      {dir: "/home/agent", files: map[string][]byte{"../x": nil}},
		"empty name":         {dir: "/home/agent", files: map[string][]byte{".": nil}},
		"file and directory": {dir: "/home/agent", files: map[string][]byte{"a": nil, "a/b": nil}},
		"NUL in name":        {dir: "/home/agent", files: map[string][]byte{"a\x00b": nil}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, executor.PlaceHomeFiles(ctx, nil, tc.dir, tc.files), executor.ErrInvalid)
		})
	}
	assert.NoError(t, executor.PlaceHomeFiles(ctx, nil, "/home/agent", nil), "no files: nothing to run")
}
