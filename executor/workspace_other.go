//go:build !linux

package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// openDirs is Linux-only: it needs openat without following links.
func openDirs(_ int, display string, _ []string, _, _ bool, _ [2]int) (int, error) {
	return -1, fmt.Errorf("%s: directories below the workspace root need Linux: %w", display, errors.ErrUnsupported)
}

// finalAt has no descriptor path off Linux: the caller uses os.Root.
func finalAt(int) (func(string) (fs.FileInfo, error), func(string) (*os.File, error)) {
	return nil, nil
}

// sameFile is os.SameFile off Linux.
func sameFile(a, b fs.FileInfo) bool { return os.SameFile(a, b) }
