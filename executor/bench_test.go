package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}}

// benchFile makes a workspace with a two-level directory and returns it,
// the host path of "src/pkg/f" in it and n bytes of data written there.
func benchFile(b *testing.B, n int) (*executor.Workspace, string, []byte) {
	ws, dir := newWorkspace(b, executor.WorkspaceOptions{})
	data := make([]byte, n)
	require.NoError(b, os.MkdirAll(filepath.Join(dir, "src", "pkg"), 0o755))
	p := filepath.Join(dir, "src", "pkg", "f")
	require.NoError(b, os.WriteFile(p, data, 0o644))
	return ws, p, data
}

// BenchmarkReadFile compares Workspace.ReadFile with os.ReadFile on the
// same file (target: within 2x):
//
//	go test -run '^$' -bench 'ReadFile|WriteFile' -benchtime 2000x -count 5 ./executor/
func BenchmarkReadFile(b *testing.B) {
	ctx := context.Background()
	for _, size := range benchSizes {
		ws, p, _ := benchFile(b, size.n)
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
				if _, err := ws.ReadFile(ctx, "src/pkg/f"); err != nil {
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
	for _, size := range benchSizes {
		ws, p, data := benchFile(b, size.n)
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
				if err := ws.WriteFile(ctx, "src/pkg/f", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
