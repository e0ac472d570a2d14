package checkpoint

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/executor"

	"golang.org/x/sys/unix"
)

// Result is what a Restore changed in the workspace: the files, links
// and directories written, the paths removed (a directory with what it
// held counts once), the bytes of the files written.
type Result = executor.RestoreInfo

// Restore makes the workspace at ws (a host directory) what checkpoint id
// holds, without following a link in it, and records id as the parent of
// the next checkpoint. Run it while no agent process runs in the
// workspace. Files and directories it makes belong to Options.UID/GID.
func (s *Store) Restore(ctx context.Context, ws, id string) (Result, error) {
	var known map[string]*Entry // the newest checkpoint: what unchanged files hold
	if latest, ok, err := s.Latest(); err != nil {
		return Result{}, err
	} else if ok {
		m, err := s.manifest(latest.ID)
		if err != nil {
			return Result{}, err
		}
		known = recent.index(m)
	}
	res, err := s.restore(ctx, ws, id, known)
	if err != nil {
		return res, err
	}
	return res, s.setHead(id)
}

// restoreInto makes ws, a workspace that is not this Store's (a fork's),
// checkpoint id's; the Store's head stays.
func (s *Store) restoreInto(ctx context.Context, ws, id string) (Result, error) {
	return s.restore(ctx, ws, id, nil)
}

// restore makes ws checkpoint id's; known are the entries whose stat tells
// what an unchanged file of ws holds.
func (s *Store) restore(ctx context.Context, ws, id string, known map[string]*Entry) (Result, error) {
	target, err := s.manifest(id)
	if err != nil {
		return Result{}, err
	}
	root, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint: open the workspace %s: %w", ws, err)
	}
	defer func() { _ = unix.Close(root) }()
	cur, specials, err := scan(ctx, root)
	if err != nil {
		return Result{}, err
	}
	r := &restorer{s: s, ctx: ctx, root: root, buf: make([]byte, copyBuf), cachedFD: -1}
	defer r.uncache()
	want := recent.index(target)
	// Removals: what the checkpoint lacks, or has as another kind. A
	// directory goes with what it holds, so its entries are skipped.
	var gone []string
	for p, e := range cur {
		if t := want[p]; t == nil || t.Kind != e.Kind || e.Kind == KindLink && t.Target != e.Target {
			gone = append(gone, p)
		}
	}
	// A FIFO, device or socket the agent made is no checkpoint's: it goes
	// too, else it would stay, or stand where the checkpoint has a
	// directory.
	for _, sk := range specials {
		gone = append(gone, sk.Path)
		cur[sk.Path] = &Entry{Path: sk.Path}
	}
	slices.Sort(gone)
	var removedDir string
	for _, p := range gone {
		if removedDir != "" && strings.HasPrefix(p, removedDir+"/") {
			continue
		}
		if err := r.remove(p, cur[p].Kind == KindDir); err != nil {
			return r.res, err
		}
		if cur[p].Kind == KindDir {
			removedDir = p
		}
		delete(cur, p)
		r.res.Removed++
	}
	for i := range target.Entries {
		if err := ctx.Err(); err != nil {
			return r.res, err
		}
		t := &target.Entries[i]
		c := cur[t.Path]
		switch t.Kind {
		case KindDir:
			err = r.dir(t, c)
		case KindFile:
			if c != nil && c.Mode == t.Mode && r.same(c, t, known[t.Path]) {
				continue
			}
			err = r.file(t)
		case KindLink:
			if c != nil {
				continue // same target: kept above
			}
			err = r.link(t)
		}
		if err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

// scan lists the workspace's entries with their stat (no content), and
// the FIFOs, devices and sockets in it.
func scan(ctx context.Context, root int) (map[string]*Entry, []Skipped, error) {
	m := &Manifest{}
	t := &taker{ctx: ctx, m: m, s: &Store{}, scanOnly: true}
	dup, err := unix.Dup(root)
	if err != nil {
		return nil, nil, err
	}
	if err := t.walkFD(dup); err != nil {
		return nil, nil, err
	}
	return index(m), m.Skipped, nil
}

// restorer is one Restore's writing.
type restorer struct {
	s    *Store
	ctx  context.Context
	root int
	res  Result
	buf  []byte
	// cached is the last parent directory opened for writing, kept for
	// the entries after it: the manifest is sorted, so a directory's
	// files come together.
	cachedDir string
	cachedFD  int
}

// same reports whether the workspace's file c already holds t's content:
// c is unchanged since the newest checkpoint (k) and that held t's hash,
// or, when that cannot be told, its content hashes to t's.
func (r *restorer) same(c, t, k *Entry) bool {
	if c.Size != t.Size {
		return false
	}
	if k != nil && k.Kind == KindFile && k.Ino == c.Ino && k.Size == c.Size && k.CTime == c.CTime && k.MTime.Equal(c.MTime) {
		return k.Hash == t.Hash
	}
	dirfd, name, err := r.parent(c.Path, false)
	if err != nil {
		return false
	}
	defer r.closeParent(dirfd)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), name)
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, r.buf); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == t.Hash
}

// writeParent is parent with create, through the cache of the last
// directory opened: release it with closeParent as well (a cached
// descriptor stays open until uncache).
func (r *restorer) writeParent(p string) (int, string, error) {
	dir, name := path.Split(p)
	if r.cachedFD >= 0 && dir == r.cachedDir {
		return r.cachedFD, name, nil
	}
	r.uncache()
	fd, name, err := r.parent(p, true)
	if err != nil || fd == r.root {
		return fd, name, err
	}
	r.cachedDir, r.cachedFD = dir, fd
	return fd, name, nil
}

// uncache closes the cached directory; a removal or a new directory may
// change what its path names.
func (r *restorer) uncache() {
	if r.cachedFD >= 0 {
		_ = unix.Close(r.cachedFD)
	}
	r.cachedDir, r.cachedFD = "", -1
}

// parent opens the directory that holds p, one component at a time below
// the workspace, never following a link; with create, missing
// directories are made (mode 0755, the sandbox user's). It returns the
// directory's descriptor (the workspace's own for a top-level p; release
// it with closeParent) and p's last component.
func (r *restorer) parent(p string, create bool) (int, string, error) {
	dir, name := path.Split(p)
	fd := r.root
	for _, comp := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if comp == "" {
			continue
		}
		next, err := unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if create && errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, comp, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil {
					r.chown(next)
				}
			}
		}
		r.closeParent(fd)
		if err != nil {
			return -1, "", fmt.Errorf("checkpoint: restore %q: open %q: %w", p, comp, err)
		}
		fd = next
	}
	return fd, name, nil
}

func (r *restorer) closeParent(fd int) {
	if fd != r.root && fd != r.cachedFD && fd >= 0 {
		_ = unix.Close(fd)
	}
}

// chown gives fd to the sandbox user.
func (r *restorer) chown(fd int) {
	if r.s.o.UID >= 0 || r.s.o.GID >= 0 {
		_ = unix.Fchown(fd, r.s.o.UID, r.s.o.GID)
	}
}

// remove removes p (a directory with what it holds) without following a
// link.
func (r *restorer) remove(p string, dir bool) error {
	r.uncache()
	dirfd, name, err := r.parent(p, false)
	if err != nil {
		return err
	}
	defer r.closeParent(dirfd)
	if dir {
		if err := removeAllAt(dirfd, name); err != nil {
			return fmt.Errorf("checkpoint: restore: remove %q: %w", p, err)
		}
		return nil
	}
	if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("checkpoint: restore: remove %q: %w", p, err)
	}
	return nil
}

// removeAllAt removes the directory name of dirfd and everything below
// it, opening each level below its parent without following a link.
func removeAllAt(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return unix.Unlinkat(dirfd, name, 0)
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		_ = f.Close()
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeAllAt(fd, n)
		} else {
			err = unix.Unlinkat(fd, n, 0)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			_ = f.Close()
			return err
		}
	}
	_ = f.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// dir makes t's directory, or sets the mode of the one there (c).
func (r *restorer) dir(t, c *Entry) error {
	if c != nil && c.Mode == t.Mode {
		return nil
	}
	dirfd, name, err := r.writeParent(t.Path)
	if err != nil {
		return err
	}
	defer r.closeParent(dirfd)
	if c == nil {
		if err := unix.Mkdirat(dirfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
		}
		r.res.Written++
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
	}
	defer func() { _ = unix.Close(fd) }()
	r.chown(fd)
	if err := unix.Fchmod(fd, uint32(t.Mode)); err != nil {
		return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
	}
	return nil
}

// tempName is a name for a file being restored beside its place.
func tempName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return ".agentbox-restore-" + hex.EncodeToString(b[:])
}

// file writes t's content into a temporary file beside its place and
// renames it over the place.
func (r *restorer) file(t *Entry) error {
	obj, err := os.Open(filepath.Join(r.s.dir, objectsDir, t.Hash[:2], t.Hash))
	if err != nil {
		return fmt.Errorf("checkpoint: restore %q: its content is not in the store: %w", t.Path, err)
	}
	defer func() { _ = obj.Close() }()
	dirfd, name, err := r.writeParent(t.Path)
	if err != nil {
		return err
	}
	defer r.closeParent(dirfd)
	tmp := tempName()
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
	}
	dst := os.NewFile(uintptr(fd), tmp)
	if t.Size <= int64(len(r.buf)) {
		// A small file in one read and one write: holes are not worth
		// the seeks.
		var n int
		if n, err = io.ReadFull(obj, r.buf[:t.Size]); err == nil || errors.Is(err, io.ErrUnexpectedEOF) && int64(n) == t.Size {
			_, err = dst.Write(r.buf[:n])
		}
	} else {
		err = copyData(dst, obj, t.Size)
	}
	if err == nil {
		r.chown(fd)
		err = unix.Fchmod(fd, uint32(t.Mode))
	}
	if err == nil {
		ts := []unix.Timespec{unix.NsecToTimespec(t.MTime.UnixNano()), unix.NsecToTimespec(t.MTime.UnixNano())}
		err = unix.UtimesNanoAt(dirfd, tmp, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
	}
	r.res.Written++
	r.res.Bytes += t.Size
	return nil
}

// copyData copies the data of src (an object, maybe sparse) to dst
// segment by segment, leaving src's holes as holes, and sets dst's size.
func copyData(dst, src *os.File, size int64) error {
	fd := int(src.Fd())
	var off int64
	for off < size {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := src.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := dst.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(dst, src, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return dst.Truncate(size)
}

// link makes t's symlink beside its place and renames it over the place.
func (r *restorer) link(t *Entry) error {
	dirfd, name, err := r.writeParent(t.Path)
	if err != nil {
		return err
	}
	defer r.closeParent(dirfd)
	tmp := tempName()
	if err := unix.Symlinkat(t.Target, dirfd, tmp); err != nil {
		return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
	}
	if r.s.o.UID >= 0 || r.s.o.GID >= 0 {
		_ = unix.Fchownat(dirfd, tmp, r.s.o.UID, r.s.o.GID, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("checkpoint: restore %q: %w", t.Path, err)
	}
	r.res.Written++
	return nil
}
