package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// benchCases are the file sizes and depths measured: "top" is a file at
// the workspace root, "nested" one two directories down (each directory
// costs the Workspace an lstat, an open, an fstat and a close).
var benchCases = []struct {
	name string
	n    int
	rel  string
}{
	{"1KiB/top", 1 << 10, "f"},
	{"1KiB/nested", 1 << 10, "src/pkg/f"},
	{"1MiB/top", 1 << 20, "f"},
	{"1MiB/nested", 1 << 20, "src/pkg/f"},
}

// benchFile makes a workspace holding n bytes at rel and returns it, the
// host path of the file and the data.
func benchFile(b *testing.B, n int, rel string) (*executor.Workspace, string, []byte) {
	ws, dir := newWorkspace(b, executor.WorkspaceOptions{})
	data := make([]byte, n)
	p := filepath.Join(dir, filepath.FromSlash(rel))
	require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(b, os.WriteFile(p, data, 0o644))
	return ws, p, data
}

// BenchmarkReadFile compares Workspace.ReadFile with os.ReadFile on the
// same file (target: within 2x):
//
//	go test -run '^$' -bench 'ReadFile|WriteFile' -benchtime 2000x -count 5 ./executor/
func BenchmarkReadFile(b *testing.B) {
	ctx := context.Background()
	for _, size := range benchCases {
		ws, p, _ := benchFile(b, size.n, size.rel)
		b.Run(size.name+"/os", func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if _, err := os.ReadFile(p); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/workspace", func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if _, err := ws.ReadFile(ctx, size.rel); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteFile compares Workspace.WriteFile (temporary file and
// rename, so readers never see a partial file) with os.WriteFile
// (truncate in place) on the same existing file.
func BenchmarkWriteFile(b *testing.B) {
	ctx := context.Background()
	for _, size := range benchCases {
		ws, p, data := benchFile(b, size.n, size.rel)
		b.Run(size.name+"/os", func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if err := os.WriteFile(p, data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/workspace", func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if err := ws.WriteFile(ctx, size.rel, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
