package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// taker is one Take's walk: walkers goroutines take directories off a
// queue, each with its own copy buffer. Each directory's entries are
// listed in name order into its dirNode; the tree of dirNodes is then
// laid out in path order (order), which costs no global sort.
type taker struct {
	s    *Store
	ctx  context.Context
	m    *Manifest
	prev map[string]*Entry
	// scanOnly lists entries with their stat and reads no content
	// (Restore's look at the workspace).
	scanOnly bool

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []dirJob
	busy     int
	err      error
	newBytes atomic.Int64
	entries  atomic.Int64
}

// dirJob is a directory to walk: its descriptor, its path and the node
// its entries go to.
type dirJob struct {
	fd   int
	rel  string
	node *dirNode
}

// dirNode is one walked directory: its entries sorted by name, and for
// each one that is a walked directory, its node (else nil).
type dirNode struct {
	// plen is the length of the entries' common path prefix (their
	// directory and a '/'; 0 at the workspace's top).
	plen    int
	entries []Entry
	subs    []*dirNode
}

// afterStat, when set (by tests), runs between an entry's stat and its
// reading: where an agent racing the walk would swap the entry.
var afterStat func(rel string)

// walkers is how many directories a Take walks at once: the walk is
// stat calls, which two cores serve better two or four at a time.
const walkers = 4

// copyBuf is the size of the buffer Take copies through; zero blocks of
// holeBlock bytes in it are left as holes in the object.
const (
	copyBuf   = 1 << 20
	holeBlock = 4 << 10
)

// walk takes every entry below the directory ws.
func (t *taker) walk(ws string) error {
	fd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // a chat's start, before its workspace is made: empty
	}
	if err != nil {
		return fmt.Errorf("checkpoint: open the workspace %s: %w", ws, err)
	}
	return t.walkFD(fd)
}

// walkFD walks the directory open as fd, and closes it; the manifest's
// entries come out sorted by path.
func (t *taker) walkFD(fd int) error {
	root := &dirNode{}
	t.cond = sync.NewCond(&t.mu)
	t.queue = []dirJob{{fd: fd, node: root}}
	var wg sync.WaitGroup
	for range walkers {
		wg.Go(t.walker)
	}
	wg.Wait()
	for _, j := range t.queue { // left by an error
		_ = unix.Close(j.fd)
	}
	t.m.NewBytes = t.newBytes.Load()
	if t.err != nil {
		return t.err
	}
	t.m.Entries = order(root, make([]Entry, 0, t.entries.Load()))
	return nil
}

// order appends the entries of the tree below n to out in path order, and
// returns it. A directory's entries are in name order, but its
// subdirectory c's subtree ("c/...") does not follow c at once: it
// comes after the siblings that sort between "c" and "c/" (such as
// "c.txt", '.' being below '/'). Those follow c directly in name order,
// and each subtree still pending sorts before its elders', so a stack of
// pending subtrees places them; the tree is walked with a stack of
// frames, not by recursion, since the agent chooses its depth.
func order(n *dirNode, out []Entry) []Entry {
	type frame struct {
		n       *dirNode
		i       int
		pending []int // entries of n whose subtree comes next, innermost last
	}
	stack := []frame{{n: n}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if k := len(f.pending); k > 0 {
			top := f.pending[k-1]
			if f.i == len(f.n.entries) || subtreeBefore(f.n.name(top), f.n.name(f.i)) {
				f.pending = f.pending[:k-1]
				stack = append(stack, frame{n: f.n.subs[top]})
				continue
			}
		}
		if f.i == len(f.n.entries) {
			stack = stack[:len(stack)-1]
			continue
		}
		out = append(out, f.n.entries[f.i])
		if f.n.subs[f.i] != nil {
			f.pending = append(f.pending, f.i)
		}
		f.i++
	}
	return out
}

// name is the name of n's entry i.
func (n *dirNode) name(i int) string { return n.entries[i].Path[n.plen:] }

// subtreeBefore reports whether the paths below directory d ("d/...")
// sort before the sibling s, which sorts after d: whether d+"/" < s.
func subtreeBefore(d, s string) bool {
	if len(s) <= len(d) || s[:len(d)] != d {
		return d < s[:min(len(d), len(s))]
	}
	return s[len(d)] > '/'
}

// walker takes directories off the queue until none is left and none is
// being walked, or a walker failed.
func (t *taker) walker() {
	var buf []byte
	if !t.scanOnly {
		buf = make([]byte, copyBuf)
	}
	var pbuf []byte // the path of the entry being taken
	for {
		t.mu.Lock()
		for len(t.queue) == 0 && t.busy > 0 && t.err == nil {
			t.cond.Wait()
		}
		if len(t.queue) == 0 || t.err != nil {
			t.cond.Broadcast()
			t.mu.Unlock()
			return
		}
		j := t.queue[len(t.queue)-1]
		t.queue = t.queue[:len(t.queue)-1]
		t.busy++
		t.mu.Unlock()
		subs, err := t.dir(j, buf, &pbuf)
		t.mu.Lock()
		t.busy--
		t.queue = append(t.queue, subs...)
		if err != nil && t.err == nil {
			t.err = err
		}
		t.cond.Broadcast()
		t.mu.Unlock()
	}
}

// dir takes the entries of j's directory (j.rel is its path, "" for the
// workspace) into j.node in name order, closes j.fd, and returns its
// subdirectories, opened, to walk next.
func (t *taker) dir(j dirJob, buf []byte, pbuf *[]byte) (subs []dirJob, err error) {
	f := os.NewFile(uintptr(j.fd), j.rel)
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %q: %w", j.rel, err)
	}
	slices.Sort(names)
	n := j.node
	if j.rel != "" {
		n.plen = len(j.rel) + 1
	}
	n.entries = make([]Entry, 0, len(names))
	for _, name := range names {
		if err := t.ctx.Err(); err != nil {
			return subs, err
		}
		*pbuf = append(append(append((*pbuf)[:0], j.rel...), '/'), name...)
		p := *pbuf
		if j.rel == "" {
			p = p[1:]
		}
		e, keep, sub, err := t.entry(j.fd, p, name, buf, j.rel == "")
		if err != nil {
			return subs, err
		}
		if !keep {
			continue
		}
		n.entries = append(n.entries, e)
		var node *dirNode
		if sub >= 0 {
			node = &dirNode{}
			subs = append(subs, dirJob{fd: sub, rel: e.Path, node: node})
		}
		n.subs = append(n.subs, node)
	}
	t.entries.Add(int64(len(n.entries)))
	return subs, nil
}

// entry takes name in the directory open as dirfd (pb is its path, in a
// buffer the next entry reuses; top says dirfd is the workspace): its
// Entry, whether it is kept, and, for a directory, its descriptor to walk
// (else -1).
func (t *taker) entry(dirfd int, pb []byte, name string, buf []byte, top bool) (Entry, bool, int, error) {
	// The previous checkpoint's entry, whose path string the new one
	// shares when it is there (looked up without making one).
	o := t.prev[string(pb)]
	var p string
	if o != nil {
		p = o.Path
	} else {
		p = string(pb)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Entry{}, false, -1, nil // removed meanwhile
		}
		return Entry{}, false, -1, fmt.Errorf("checkpoint: stat %q: %w", p, err)
	}
	if afterStat != nil {
		afterStat(p)
	}
	if top && name == lostFound && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 {
		// The file system's own (a workspace claim on a block volume
		// is an ext4 root), not the agent's, which cannot make a
		// directory root owns: neither kept nor, by a restore, removed.
		return Entry{}, false, -1, nil
	}
	e := Entry{Path: p, Mode: fs.FileMode(st.Mode & 0o7777), MTime: time.Unix(st.Mtim.Unix()), Ino: st.Ino, CTime: st.Ctim.Nano()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Kind = KindDir
		sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			// Replaced by a link or a file since the stat: the next
			// checkpoint sees what it became.
			sub = -1
		}
		return e, true, sub, nil
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return Entry{}, false, -1, nil // replaced meanwhile
		}
		e.Kind, e.Target = KindLink, target
	case unix.S_IFREG:
		e.Kind, e.Size = KindFile, st.Size
		if t.scanOnly {
			// Restore reads the content only where it must.
		} else if o != nil && o.Kind == KindFile && o.Ino == e.Ino && o.Size == e.Size &&
			o.CTime == e.CTime && o.MTime.Equal(e.MTime) {
			e.Hash = o.Hash // unchanged: not read again
		} else if err := t.store(dirfd, name, &e, buf); err != nil {
			return Entry{}, false, -1, err
		} else if e.Hash == "" {
			return Entry{}, false, -1, nil // replaced meanwhile
		}
	default:
		t.mu.Lock()
		t.m.Skipped = append(t.m.Skipped, Skipped{Path: p, What: fileType(st.Mode)})
		t.mu.Unlock()
		return Entry{}, false, -1, nil
	}
	return e, true, -1, nil
}

// lostFound is the directory mkfs makes at a file system's root.
const lostFound = "lost+found"

// readlinkat reads the link name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// store copies the file name of dirfd into the Store while hashing it,
// and sets e.Hash. The file is opened without following a link and
// without blocking, and must still be e's inode.
func (t *taker) store(dirfd int, name string, e *Entry, buf []byte) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
			return nil // replaced meanwhile
		}
		return fmt.Errorf("checkpoint: open %q: %w", e.Path, err)
	}
	src := os.NewFile(uintptr(fd), e.Path)
	defer func() { _ = src.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != e.Ino {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Join(t.s.dir, tmpDir), "object")
	if err != nil {
		return fmt.Errorf("checkpoint: store %q: %w", e.Path, err)
	}
	h := sha256.New()
	n, werr := t.copySparse(tmp, io.TeeReader(src, h), buf)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return werr
	}
	e.Size = n
	e.Hash = hex.EncodeToString(h.Sum(nil))
	dst := filepath.Join(t.s.dir, objectsDir, e.Hash[:2], e.Hash)
	if _, err := os.Lstat(dst); err == nil {
		_ = os.Remove(tmp.Name()) // the store has it
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("checkpoint: store %q: %w", e.Path, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("checkpoint: store %q: %w", e.Path, err)
	}
	if t.newBytes.Add(allocated(dst)) > t.s.o.MaxBytes {
		_ = os.Remove(dst)
		return fmt.Errorf("%w: the checkpoint's new content passed %d bytes at %q; raise the bound or let the agent keep less in the workspace", ErrTooLarge, t.s.o.MaxBytes, e.Path)
	}
	return nil
}

// copySparse copies r to w, seeking over zero blocks (leaving holes), and
// stops with ErrTooLarge once the checkpoint's new bytes would pass the
// bound. It returns the bytes copied, holes included.
func (t *taker) copySparse(w *os.File, r io.Reader, buf []byte) (int64, error) {
	var n, written int64
	zero := make([]byte, holeBlock)
	for {
		k, err := io.ReadFull(r, buf)
		for off := 0; off < k; off += holeBlock {
			b := buf[off:min(off+holeBlock, k)]
			if len(b) == holeBlock && bytes.Equal(b, zero) {
				if _, err := w.Seek(holeBlock, io.SeekCurrent); err != nil {
					return n, err
				}
				continue
			}
			if _, err := w.Write(b); err != nil {
				return n, fmt.Errorf("checkpoint: write an object: %w", err)
			}
			if written += int64(len(b)); t.newBytes.Load()+written > t.s.o.MaxBytes {
				return n, fmt.Errorf("%w: the checkpoint's new content passed %d bytes; raise the bound or let the agent keep less in the workspace", ErrTooLarge, t.s.o.MaxBytes)
			}
		}
		n += int64(k)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// A file that ends in a hole needs its size set.
			return n, w.Truncate(n)
		}
		if err != nil {
			return n, fmt.Errorf("checkpoint: read a file: %w", err)
		}
		if err := t.ctx.Err(); err != nil {
			return n, err
		}
	}
}

// allocated is the disk space p takes (its blocks), 0 when it is gone.
func allocated(p string) int64 {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// fileType names what a skipped entry is.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "unknown"
}
