//go:build linux && arm64

package executor

import "syscall"

// haveFstatat: this platform has the descriptor path of finalAt.
const haveFstatat = true

func fstatat(dirfd int, name string, st *syscall.Stat_t, flags int) error {
	return syscall.Fstatat(dirfd, name, st, flags)
}
