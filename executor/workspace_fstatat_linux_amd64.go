//go:build linux && amd64

package executor

import (
	"syscall"
	"unsafe"
)

// haveFstatat: this platform has the descriptor path of finalAt.
const haveFstatat = true

// fstatat is newfstatat(2), which package syscall does not export on amd64.
func fstatat(dirfd int, name string, st *syscall.Stat_t, flags int) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, e := syscall.Syscall6(syscall.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
