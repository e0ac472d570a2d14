package helper

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
)

// maxSockPath is the longest unix socket path the kernel accepts (sun_path
// holds 108 bytes including the terminating NUL).
const maxSockPath = 107

// shortSockPath returns a path naming dir/name that fits in sun_path: the
// plain path when it is short enough, otherwise /proc/self/fd/N/name with
// dir held open as fd N until done is called. Host data directories such as
// {data}/sandboxes/{64-hex id}/ come close to the limit.
func shortSockPath(dir, name string) (path string, done func(), err error) {
	p := filepath.Join(dir, name)
	if len(p) <= maxSockPath {
		return p, func() {}, nil
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("helper: socket path %s is over %d bytes and its directory cannot be opened: %w", p, maxSockPath, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name, func() { _ = syscall.Close(fd) }, nil
}

// dialSock dials dir/name, however long the path.
func dialSock(ctx context.Context, dir, name string) (net.Conn, error) {
	p, done, err := shortSockPath(dir, name)
	if err != nil {
		return nil, err
	}
	defer done()
	var d net.Dialer
	return d.DialContext(ctx, "unix", p)
}

// listenSock listens on dir/name, however long the path. The socket file is
// left in place when the listener closes if the path was long (the
// /proc/self/fd name is gone by then); callers remove stale files first.
// A non-zero mode is set on the socket's descriptor before the bind, so the
// file appears with it (less the umask) and is never chmodded by path.
func listenSock(ctx context.Context, dir, name string, mode uint32) (net.Listener, error) {
	p, done, err := shortSockPath(dir, name)
	if err != nil {
		return nil, err
	}
	defer done()
	return listenPath(ctx, p, p == filepath.Join(dir, name), mode)
}

// listenSockAt listens on name in the directory dirfd, through
// /proc/self/fd/N; the socket file stays when the listener closes.
func listenSockAt(ctx context.Context, dirfd int, name string, mode uint32) (net.Listener, error) {
	return listenPath(ctx, "/proc/self/fd/"+strconv.Itoa(dirfd)+"/"+name, false, mode)
}

// listenPath listens on p; unlink removes the file when the listener
// closes.
func listenPath(ctx context.Context, p string, unlink bool, mode uint32) (net.Listener, error) {
	var lc net.ListenConfig
	if mode != 0 {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var ferr error
			if err := c.Control(func(fd uintptr) { ferr = syscall.Fchmod(int(fd), mode) }); err != nil {
				return err
			}
			if ferr != nil {
				return fmt.Errorf("set mode %o on the socket before binding it: %w", mode, ferr)
			}
			return nil
		}
	}
	ln, err := lc.Listen(ctx, "unix", p)
	if err != nil {
		return nil, err
	}
	if !unlink {
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
	}
	return ln, nil
}
