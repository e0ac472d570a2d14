//go:build !linux

package executor

import (
	"errors"
	"fmt"
)

// openDirs is Linux-only: it needs openat without following links.
func openDirs(_ int, display string, _ []string, _ bool, _ [2]int) (int, error) {
	return -1, fmt.Errorf("%s: directories below the workspace root need Linux: %w", display, errors.ErrUnsupported)
}
