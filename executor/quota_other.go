//go:build !linux

package executor

import "syscall"

// lstatAt: other systems use os.Root (see quota_linux.go).
func lstatAt(int, string, *syscall.Stat_t) (bool, error) { return false, nil }
