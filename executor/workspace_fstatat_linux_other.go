//go:build linux && !amd64 && !arm64

package executor

import "syscall"

// haveFstatat: other Linux platforms use os.Root for the final open.
const haveFstatat = false

func fstatat(int, string, *syscall.Stat_t, int) error { return syscall.ENOSYS }
