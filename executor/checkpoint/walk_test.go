package checkpoint_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/checkpoint"
)

// paths lists a manifest's entry paths in its order.
func paths(m *checkpoint.Manifest) []string {
	out := make([]string, len(m.Entries))
	for i, e := range m.Entries {
		out[i] = e.Path
	}
	return out
}

// TestEntriesInPathOrder: the walk lays a directory's subtree out where
// its paths sort, not right after the directory, when siblings sort
// between "d" and "d/" (bytes below '/', such as '.', '-', '!' and
// control bytes), at every depth; and a second take of the same tree, walked
// concurrently in another order, gives the same list. The manifest's
// order is what changed counts and restores rely on.
func TestEntriesInPathOrder(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	names := []string{"a", "a!", "a\x01", "a.b", "a-", "a0", "b"}
	var want []string
	var mk func(dir string, depth int)
	mk = func(dir string, depth int) {
		for _, n := range names {
			p := filepath.Join(dir, n)
			rel, _ := filepath.Rel(ws, p)
			want = append(want, rel)
			if depth == 0 || n == "b" {
				require.NoError(t, os.WriteFile(p, []byte(rel), 0o644))
				continue
			}
			require.NoError(t, os.Mkdir(p, 0o755))
			mk(p, depth-1)
		}
	}
	mk(ws, 3)
	slices.Sort(want)
	s := open(t, checkpoint.Options{})
	first, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	assert.Equal(t, want, paths(first))
	again, err := s.Take(ctx, ws, "2")
	require.NoError(t, err)
	assert.Equal(t, want, paths(again))
	assert.Zero(t, again.Changed)
}

// TestTakeUnderChurn: an agent process left running (the caller's
// contract says none runs, but a take must stay sound if one does) adds,
// removes and replaces files, directories and links while the walkers
// run. Every take succeeds with entries in strict path order, reads
// nothing through a link, and an untouched part of the tree is whole.
func TestTakeUnderChurn(t *testing.T) {
	ctx := context.Background()
	outside, secret := hostSecret(t)
	ws := t.TempDir()
	for i := range 2000 {
		write(t, ws, fmt.Sprintf("stable/d%d/f%d", i%20, i), fmt.Sprint(i), 0o644)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				p := filepath.Join(ws, fmt.Sprintf("churn%d/d%d", w, i%7))
				switch i % 4 {
				case 0:
					_ = os.MkdirAll(filepath.Join(p, "sub"), 0o755)
					_ = os.WriteFile(filepath.Join(p, "sub", "f"), []byte(fmt.Sprint(i)), 0o644)
				case 1:
					_ = os.RemoveAll(p)
					_ = os.Symlink(filepath.Join(outside, "dir"), p)
				case 2:
					_ = os.Remove(p)
					_ = os.Symlink(filepath.Join(outside, "secret"), p+".f")
				case 3:
					_ = os.Remove(p + ".f")
					_ = os.WriteFile(p+".f", []byte("mine"), 0o644)
				}
			}
		})
	}
	s := open(t, checkpoint.Options{})
	for range 20 {
		c, err := s.Take(ctx, ws, "churn")
		require.NoError(t, err)
		got := paths(c)
		require.True(t, slices.IsSortedFunc(got, strings.Compare), "entries sorted")
		require.Equal(t, len(got), len(slices.Compact(slices.Clone(got))), "no path twice")
		stable := 0
		for _, p := range got {
			if strings.HasPrefix(p, "stable/") {
				stable++
			}
		}
		require.Equal(t, 2000+20, stable, "the untouched tree is whole: its files and their directories")
	}
	stop.Store(true)
	wg.Wait()
	assertStoreLacks(t, s, secret)
}
