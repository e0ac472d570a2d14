//go:build linux

package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"
)

// openDirs opens the directory dirs below the directory descriptor start,
// one component at a time, never following a link and never blocking;
// create makes missing directories, owned by owner (-1 leaves an id);
// repair (which implies create) also removes, without following, a
// component that is a link, FIFO, file or anything else but a directory,
// and makes the directory in its place. The caller closes the returned
// descriptor.
func openDirs(start int, display string, dirs []string, create, repair bool, owner [2]int) (int, error) {
	create = create || repair
	cur := start
	closeCur := func() {
		if cur != start {
			_ = syscall.Close(cur)
		}
	}
	for _, comp := range dirs {
		next, err := openDirAt(cur, comp)
		if repair && (errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR)) {
			// unlinkat never follows a link: the link itself goes.
			if uerr := syscall.Unlinkat(cur, comp); uerr != nil && !errors.Is(uerr, syscall.ENOENT) {
				closeCur()
				return -1, fmt.Errorf("%s: remove %q, which is not a directory: %w", display, comp, uerr)
			}
			err = syscall.ENOENT
		}
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
	err := syscall.Mkdirat(dirfd, comp, 0o700)
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

// finalAt returns lstat and open of names in the directory descriptor
// dirfd (nil when dirfd is -1): fstatat(AT_SYMLINK_NOFOLLOW) and
// openat(O_RDONLY|O_NOFOLLOW|O_NONBLOCK), the calls os.Root makes, without
// reopening the directory as an os.Root first.
func finalAt(dirfd int) (lstat func(string) (fs.FileInfo, error), open func(string) (*os.File, error)) {
	if dirfd < 0 || !haveFstatat {
		return nil, nil
	}
	lstat = func(name string) (fs.FileInfo, error) {
		si := &statInfo{name: name}
		for {
			err := fstatat(dirfd, name, &si.st, atSymlinkNoFollow)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
			}
			return si, nil
		}
	}
	open = func(name string) (*os.File, error) {
		for {
			fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
			return os.NewFile(uintptr(fd), name), nil
		}
	}
	return lstat, open
}

// statInfo is an fs.FileInfo over a raw lstat.
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

// Mode maps the stat's type bits as package os does.
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	}
	if s.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// sameFile reports whether a and b are the same file (device and inode),
// for infos from package os and from statInfo alike.
func sameFile(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
