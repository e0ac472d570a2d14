package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// CheckQuota measures the workspace dir and returns an error wrapping
// ErrNoSpace, naming the sandbox option to raise, when it holds more than
// disk bytes (allocated blocks) or more than inodes files and
// directories. The backends' quota watchdogs call it: executor/docker on
// the host, the helper inside a pod for executor/kubernetes.
func CheckQuota(dir string, disk, inodes int64) error {
	b, n, err := MeasureDir(dir, disk, inodes)
	if qerr := OverQuota(b, n, disk, inodes); qerr != nil {
		return qerr
	}
	return err
}

// OverQuota is CheckQuota's verdict on a measurement: an error wrapping
// ErrNoSpace naming the sandbox option to raise when bytes or n (files and
// directories) are past disk or inodes, else nil.
func OverQuota(bytes, n, disk, inodes int64) error {
	switch {
	case n > inodes:
		return fmt.Errorf("the workspace passed its quota of %d files and directories (it has at least %d); delete files or raise sandbox.max_inodes: %w", inodes, n, ErrNoSpace)
	case bytes > disk:
		return fmt.Errorf("the workspace passed its disk quota of %s (it uses at least %s); free space or raise sandbox.max_disk: %w", FormatBytes(disk), FormatBytes(bytes), ErrNoSpace)
	}
	return nil
}

// MeasureDir sums the allocated bytes and counts the entries under dir
// without following symlinks (through os.Root). It stops as soon as either
// passes its limit, so a flood costs at most limit+1 lstat calls.
func MeasureDir(dir string, maxBytes, maxInodes int64) (bytes, inodes int64, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = root.Close() }()
	stack := []string{"."}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		f, err := root.Open(d)
		if err != nil {
			continue // removed meanwhile, or replaced by a symlink
		}
		fd := int(f.Fd())
		for {
			// Names only: entryUsage stats each entry anyway, and ReadDir
			// on a file of an os.Root stats every entry too.
			names, rerr := f.Readdirnames(256)
			for _, n := range names {
				size, isDir, err := entryUsage(root, fd, d, n)
				if err != nil {
					continue // removed meanwhile
				}
				inodes++
				bytes += size
				if inodes > maxInodes || bytes > maxBytes {
					_ = f.Close()
					return bytes, inodes, nil
				}
				if isDir {
					stack = append(stack, filepath.Join(d, n))
				}
			}
			if rerr != nil || len(names) == 0 {
				break
			}
		}
		_ = f.Close()
	}
	return bytes, inodes, nil
}

// entryUsage is the allocated bytes of the entry name in the directory
// dir (open as dirfd) and whether it is a directory, without following a
// symlink.
func entryUsage(root *os.Root, dirfd int, dir, name string) (int64, bool, error) {
	var st syscall.Stat_t
	if ok, err := lstatAt(dirfd, name, &st); ok {
		return st.Blocks * 512, err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR, err
	}
	fi, err := root.Lstat(filepath.Join(dir, name))
	if err != nil {
		return 0, false, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512, fi.IsDir(), nil
	}
	return fi.Size(), fi.IsDir(), nil
}

// FormatBytes renders n in the largest binary unit that divides it, to
// one decimal ("2.0 GiB"; "512 B" under a KiB).
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
