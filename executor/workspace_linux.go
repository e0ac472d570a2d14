//go:build linux

package executor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// openDirs opens the directory dirs below the directory descriptor start,
// one component at a time, never following a link and never blocking;
// create makes missing directories, owned by owner (-1 leaves an id). The
// caller closes the returned descriptor.
func openDirs(start int, display string, dirs []string, create bool, owner [2]int) (int, error) {
	cur := start
	closeCur := func() {
		if cur != start {
			_ = syscall.Close(cur)
		}
	}
	for _, comp := range dirs {
		next, err := openDirAt(cur, comp)
		if create && errors.Is(err, syscall.ENOENT) {
			if err := mkdirAt(cur, comp, owner); err != nil {
				closeCur()
				return -1, fmt.Errorf("%s: create directory %q: %w", display, comp, err)
			}
			next, err = openDirAt(cur, comp)
		}
		if err != nil {
			err = dirError(cur, display, comp, err)
			closeCur()
			return -1, err
		}
		closeCur()
		cur = next
	}
	return cur, nil
}

func openDirAt(dirfd int, comp string) (int, error) {
	for {
		fd, err := syscall.Openat(dirfd, comp, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if !errors.Is(err, syscall.EINTR) {
			return fd, err
		}
	}
}

// atSymlinkNoFollow is Linux's AT_SYMLINK_NOFOLLOW, which package syscall
// does not export.
const atSymlinkNoFollow = 0x100

// mkdirAt makes directory comp in dirfd and gives it to owner. An existing
// entry is left to the open that follows, which refuses all but a
// directory.
func mkdirAt(dirfd int, comp string, owner [2]int) error {
	err := syscall.Mkdirat(dirfd, comp, 0o755)
	if errors.Is(err, syscall.EEXIST) {
		return nil
	}
	if err != nil {
		return err
	}
	if owner[0] != -1 || owner[1] != -1 {
		// AT_SYMLINK_NOFOLLOW: if the new directory was already swapped for
		// a link, this changes the link, and the open refuses it.
		if err := syscall.Fchownat(dirfd, comp, owner[0], owner[1], atSymlinkNoFollow); err != nil {
			return fmt.Errorf("give it to %d:%d: %w", owner[0], owner[1], err)
		}
	}
	return nil
}

// dirError explains why component comp of dirfd could not be opened as a
// directory, with this package's sentinels.
func dirError(dirfd int, display, comp string, err error) error {
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%s: %q: %w (%w)", display, comp, ErrNotFound, err)
	}
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
		// Only to word the error: the lstat of an entry of the directory
		// the descriptor names, through its /proc/self/fd entry.
		if fi, serr := os.Lstat("/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + comp); serr == nil {
			if fi.IsDir() {
				return fmt.Errorf("%s: directory %q %w", display, comp, errChanged)
			}
			if cerr := checkType(display, fi, true, false); cerr != nil {
				return cerr
			}
		}
		if errors.Is(err, syscall.ELOOP) {
			return fmt.Errorf("%s: %q: %w (%w)", display, comp, ErrPathEscapes, err)
		}
		return fmt.Errorf("%s: %q: %w (%w)", display, comp, ErrInvalid, err)
	}
	return fmt.Errorf("%s: open directory %q: %w", display, comp, err)
}
