package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Default caps of a Workspace.
const (
	DefaultMaxFileSize = 64 << 20
	DefaultMaxEntries  = 10000
)

// maxIDLen bounds user and chat ids; they become directory names.
const maxIDLen = 128

// ValidateID checks a user or chat id: 1-128 chars of [A-Za-z0-9_.-], not
// starting with '.' or '-', not "." or "..". kind names the id in the error
// ("user id"). The error wraps ErrInvalid.
func ValidateID(kind, id string) error {
	if id == "" {
		return fmt.Errorf("%s is empty; set it to 1-%d characters of [A-Za-z0-9_.-]: %w", kind, maxIDLen, ErrInvalid)
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("%s is %d characters long; the limit is %d: %w", kind, len(id), maxIDLen, ErrInvalid)
	}
	if id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("%s %q starts with %q; it must start with a letter, digit or '_': %w", kind, id, id[0], ErrInvalid)
	}
	// By rune, so that the message names the character the client sent
	// (an invalid byte is reported as U+FFFD).
	for i, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%s %q has %q (%U) at byte %d; only [A-Za-z0-9_.-] are allowed: %w", kind, id, c, c, i, ErrInvalid)
		}
	}
	return nil
}

// PrepareWorkspace creates the chat's workspace, {dataDir}/ws/{name} with
// a name that carries no id (see WorkspaceLayout), through an os.Root
// opened on dataDir (never following a symlink below dataDir; both ids
// validated with ValidateID), and returns its path. A workspace of the
// legacy layout ({dataDir}/workspaces/{user}/chat-{chat}) is moved there
// first. The chat directory it creates is chowned to uid:gid (-1 leaves
// that id); the shared "ws" directory stays owned by the calling process.
// An existing workspace is reused as it is.
func PrepareWorkspace(dataDir, user, chat string, uid, gid int) (string, error) {
	if err := ValidateID("user id", user); err != nil {
		return "", err
	}
	if err := ValidateID("chat id", chat); err != nil {
		return "", err
	}
	if dataDir == "" {
		return "", fmt.Errorf("prepare workspace: data directory is empty; configure one: %w", ErrInvalid)
	}
	l, err := OpenWorkspaceLayout(dataDir)
	if err != nil {
		return "", fmt.Errorf("prepare workspace: %w", err)
	}
	return l.Prepare(user, chat, uid, gid)
}

// Prepare is PrepareWorkspace with this layout's key; the ids must be
// valid (ValidateID).
func (l *WorkspaceLayout) Prepare(user, chat string, uid, gid int) (string, error) {
	root, err := os.OpenRoot(l.dataDir)
	if err != nil {
		return "", fmt.Errorf("prepare workspace: open data directory: %w", err)
	}
	defer func() { _ = root.Close() }()
	if err := l.migrate(root, user, chat); err != nil {
		return "", fmt.Errorf("prepare workspace: %w", err)
	}
	top, err := root.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return "", fmt.Errorf("prepare workspace: open data directory: %w", err)
	}
	defer func() { _ = top.Close() }()

	ws, err := openDirs(int(top.Fd()), WorkspacesDir, []string{WorkspacesDir}, true, false, [2]int{-1, -1})
	if err != nil {
		return "", fmt.Errorf("prepare workspace: %w", err)
	}
	defer func() { _ = syscall.Close(ws) }()
	name := l.Name(user, chat)
	chatDir, err := openDirs(ws, WorkspacesDir+"/"+name, []string{name}, true, false, [2]int{uid, gid})
	if err != nil {
		return "", fmt.Errorf("prepare workspace: %w", err)
	}
	_ = syscall.Close(chatDir)
	return l.Dir(user, chat), nil
}

// WorkspaceOptions configures a Workspace.
type WorkspaceOptions struct {
	// UID and GID own the files and directories the Workspace creates (the
	// sandbox user). -1 leaves that id as the process's; note that 0 means
	// root, not "unset".
	UID, GID int
	// MaxFileSize caps ReadFile, WriteFile and EditFile; 0 means
	// DefaultMaxFileSize (64 MiB).
	MaxFileSize int64
	// MaxEntries caps the entries ListDir returns; 0 means
	// DefaultMaxEntries (10000).
	MaxEntries int
}

// Workspace is the host-side file API over one chat's workspace directory,
// which a process in the sandbox may change at any moment. Directories are
// entered one component at a time with openat(O_DIRECTORY|O_NOFOLLOW|
// O_NONBLOCK) and every file is reached through an os.Root on its parent
// directory, so nothing outside the workspace is reachable, whatever the
// races: symbolic links anywhere in a path are refused (never followed,
// even when they would stay inside), as are FIFOs, sockets and devices,
// and no open ever blocks; file sizes and entry counts are capped. Names
// are relative to the workspace or absolute under ContainerWorkdir.
//
// Linux only (it uses openat and /proc/self/fd); elsewhere names below the
// root fail with errors.ErrUnsupported.
//
// A Workspace is safe for concurrent use. Close may be called more than once.
type Workspace struct {
	dir     string
	root    *os.Root
	rootDir *os.File // the root's descriptor, where walks start
	rootFD  int
	opts    WorkspaceOptions

	// mu is held for reading by every operation and for writing by Close,
	// so that rootFD is never used after it was closed (and reused).
	mu       sync.RWMutex
	closed   bool
	closeErr error
}

var _ FS = (*Workspace)(nil)

// OpenWorkspace opens dir (an existing directory, usually from
// PrepareWorkspace) as a Workspace.
func OpenWorkspace(dir string, opts WorkspaceOptions) (*Workspace, error) {
	if dir == "" {
		return nil, fmt.Errorf("open workspace: directory is empty: %w", ErrInvalid)
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open workspace %s: %w (%w); create it with PrepareWorkspace", dir, ErrNotFound, err)
		}
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	rootDir, err := root.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	return &Workspace{dir: dir, root: root, rootDir: rootDir, rootFD: int(rootDir.Fd()), opts: opts}, nil
}

// Dir returns the workspace's host directory.
func (w *Workspace) Dir() string { return w.dir }

// Close releases the directory handles, after the operations in flight.
// Later operations fail with an error wrapping os.ErrClosed; later Close
// calls return the first one's result.
func (w *Workspace) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.closeErr = errors.Join(w.rootDir.Close(), w.root.Close())
	}
	return w.closeErr
}

// acquire holds the workspace open for one operation; release with
// w.mu.RUnlock.
func (w *Workspace) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return fmt.Errorf("workspace %s: %w", w.dir, os.ErrClosed)
	}
	return nil
}

// ReadFile returns the content of a regular file. A missing file wraps
// ErrNotFound; a file over MaxFileSize wraps ErrOutputTooLarge.
func (w *Workspace) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if err := w.acquire(ctx); err != nil {
		return nil, err
	}
	defer w.mu.RUnlock()
	data, _, err := w.readFile(name)
	return data, err
}

// readFile reads a regular file and returns its info (for EditFile).
func (w *Workspace) readFile(name string) ([]byte, fs.FileInfo, error) {
	p, err := w.resolve(name, false)
	if err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	defer p.close()
	if err := p.fileOnly("read"); err != nil {
		return nil, nil, err
	}
	f, fi, err := w.openFinal(p, false)
	if err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	defer func() { _ = f.Close() }()
	if fi.Size() > w.opts.MaxFileSize {
		return nil, nil, fmt.Errorf("read %s: %d bytes is over the %d-byte cap; read a smaller file or raise MaxFileSize: %w",
			p.display, fi.Size(), w.opts.MaxFileSize, ErrOutputTooLarge)
	}
	// The file can grow after fstat; read at most one byte past the cap.
	buf := make([]byte, 0, fi.Size()+1)
	for {
		if int64(len(buf)) > w.opts.MaxFileSize {
			return nil, nil, fmt.Errorf("read %s: grew over the %d-byte cap while being read: %w", p.display, w.opts.MaxFileSize, ErrOutputTooLarge)
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", p.display, err)
		}
	}
	if int64(len(buf)) > w.opts.MaxFileSize {
		return nil, nil, fmt.Errorf("read %s: grew over the %d-byte cap while being read: %w", p.display, w.opts.MaxFileSize, ErrOutputTooLarge)
	}
	return buf, fi, nil
}

// WriteFile replaces or creates a regular file, creating missing parent
// directories. It writes a temporary file in the same directory and renames
// it over the target, so readers see the old or the new content, never a
// mix. A new file gets mode 0644 and new files and directories belong to
// UID:GID; an existing file keeps its mode and owner.
func (w *Workspace) WriteFile(ctx context.Context, name string, data []byte) error {
	if err := w.acquire(ctx); err != nil {
		return err
	}
	defer w.mu.RUnlock()
	if int64(len(data)) > w.opts.MaxFileSize {
		return fmt.Errorf("write %s: %d bytes is over the %d-byte cap; write less or raise MaxFileSize: %w",
			name, len(data), w.opts.MaxFileSize, ErrOutputTooLarge)
	}
	p, err := w.resolve(name, true)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	defer p.close()
	if err := p.fileOnly("write"); err != nil {
		return err
	}
	if err := w.writeAtomic(p, data, true); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// Restorer is implemented by sandboxes (and Workspace) that can restore a
// file the host owns: see Workspace.RestoreFile.
type Restorer interface {
	RestoreFile(ctx context.Context, name string, data []byte) error
}

var _ Restorer = (*Workspace)(nil)

// RestoreFile writes a file the host owns in the workspace (one the
// gateway rewrites before every run, like a system prompt file) over
// whatever the sandbox put in its way: a parent directory that became a
// symbolic link, FIFO or file is removed and made a directory again, and
// a target that became a link, FIFO, socket or directory is removed, all
// without following any link, so nothing outside the workspace is touched.
// The file gets mode 0644 and UID:GID whatever it had. Write host files
// with it before the agent runs, so that a chat whose agent planted a link
// keeps working; hooks' writes keep WriteFile's refusals.
func (w *Workspace) RestoreFile(ctx context.Context, name string, data []byte) error {
	if err := w.acquire(ctx); err != nil {
		return err
	}
	defer w.mu.RUnlock()
	if int64(len(data)) > w.opts.MaxFileSize {
		return fmt.Errorf("restore %s: %d bytes is over the %d-byte cap; write less or raise MaxFileSize: %w",
			name, len(data), w.opts.MaxFileSize, ErrOutputTooLarge)
	}
	p, err := w.resolveWalk(name, true, true)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer p.close()
	if err := p.fileOnly("restore"); err != nil {
		return err
	}
	dir, err := p.root()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fi, err := dir.Lstat(p.base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("restore %s: %w", p.display, mapErr(err))
	case fi.Mode().IsDir():
		// os.Root's RemoveAll never follows a link below the directory.
		if err := dir.RemoveAll(p.base); err != nil {
			return fmt.Errorf("restore %s: remove the directory in its place: %w", p.display, err)
		}
	case !fi.Mode().IsRegular():
		if err := dir.Remove(p.base); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: remove the %s in its place: %w", p.display, typeName(fi.Mode().Type()), err)
		}
	}
	if err := w.writeAtomic(p, data, false); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// ListDir lists a directory's entries sorted by name, as they are (a
// symbolic link is listed, not followed). More than MaxEntries entries wrap
// ErrOutputTooLarge.
func (w *Workspace) ListDir(ctx context.Context, name string) ([]FileInfo, error) {
	if err := w.acquire(ctx); err != nil {
		return nil, err
	}
	defer w.mu.RUnlock()
	parts, err := splitName(name)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	p, err := w.openDir(strings.Join(parts, "/"), parts, false, false)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	defer p.close()
	dir, err := p.root()
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	f, err := dir.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p.display, mapErr(err))
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(w.opts.MaxEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list %s: %w", p.display, err)
	}
	if len(names) > w.opts.MaxEntries {
		return nil, fmt.Errorf("list %s: more than %d entries; list a subdirectory or raise MaxEntries: %w",
			p.display, w.opts.MaxEntries, ErrOutputTooLarge)
	}
	slices.Sort(names)
	out := make([]FileInfo, 0, len(names))
	for _, n := range names {
		// Lstat through the directory's own root: a path-based lstat could
		// be redirected by a swapped parent.
		fi, err := dir.Lstat(n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", p.display, err)
		}
		out = append(out, toFileInfo(n, fi))
	}
	return out, nil
}

// Stat describes a regular file or directory. Symbolic links wrap
// ErrPathEscapes, special files ErrInvalid, missing names ErrNotFound.
func (w *Workspace) Stat(ctx context.Context, name string) (FileInfo, error) {
	if err := w.acquire(ctx); err != nil {
		return FileInfo{}, err
	}
	defer w.mu.RUnlock()
	p, err := w.resolve(name, false)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat: %w", err)
	}
	defer p.close()
	base := p.base
	if base == "" {
		base = "."
	}
	root, err := p.root()
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat: %w", err)
	}
	fi, err := root.Lstat(base)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %s: %w", p.display, mapErr(err))
	}
	if err := checkType(p.display, fi, false, true); err != nil {
		return FileInfo{}, fmt.Errorf("stat: %w", err)
	}
	return toFileInfo(path.Base(p.display), fi), nil
}

// EditFile applies edits (see ApplyEdits) to a regular file and writes the
// result atomically, keeping the file's mode and owner. Nothing is written
// when any edit fails.
func (w *Workspace) EditFile(ctx context.Context, name string, edits []Edit) (EditResult, error) {
	if err := w.acquire(ctx); err != nil {
		return EditResult{}, err
	}
	defer w.mu.RUnlock()
	data, _, err := w.readFile(name)
	if err != nil {
		return EditResult{}, fmt.Errorf("edit: %w", err)
	}
	res, err := ApplyEdits(string(data), edits)
	if err != nil {
		return EditResult{}, fmt.Errorf("edit %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return EditResult{}, err
	}
	if res.Content == string(data) {
		return res, nil
	}
	if int64(len(res.Content)) > w.opts.MaxFileSize {
		return EditResult{}, fmt.Errorf("edit %s: the result, %d bytes, is over the %d-byte cap: %w",
			name, len(res.Content), w.opts.MaxFileSize, ErrOutputTooLarge)
	}
	p, err := w.resolve(name, false)
	if err != nil {
		return EditResult{}, fmt.Errorf("edit: %w", err)
	}
	defer p.close()
	if err := w.writeAtomic(p, []byte(res.Content), true); err != nil {
		return EditResult{}, fmt.Errorf("edit: %w", err)
	}
	return res, nil
}

// resolved is a name split into an open parent directory and a final
// component ("" for the workspace root itself).
type resolved struct {
	display string   // the name relative to the workspace, for messages
	dir     *os.Root // the parent directory, opened on first use (root)
	fd      int      // the parent directory's descriptor, or -1
	base    string
	owned   bool // dir and fd must be closed
	slash   bool // the name ended in "/": it must be a directory
}

// root returns the parent directory as an os.Root. Below the workspace
// root it is opened on first use through the walk's descriptor's
// /proc/self/fd entry, which names that very directory however the tree
// changes; reads on the descriptor alone never need it.
func (p *resolved) root() (*os.Root, error) {
	if p.dir != nil {
		return p.dir, nil
	}
	r, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(p.fd))
	if err != nil {
		return nil, fmt.Errorf("%s: reopen directory through /proc/self/fd (is /proc mounted?): %w", p.display, err)
	}
	p.dir = r
	return r, nil
}

// fileOnly refuses the workspace root and names ending in "/" where a
// file is needed.
func (p *resolved) fileOnly(op string) error {
	if p.base == "" || p.slash {
		return fmt.Errorf("%s %s: names a directory; name a file (ListDir lists a directory): %w", op, p.display, ErrInvalid)
	}
	return nil
}

func (p *resolved) close() {
	if !p.owned {
		return
	}
	if p.dir != nil {
		_ = p.dir.Close()
	}
	if p.fd >= 0 {
		_ = syscall.Close(p.fd)
	}
}

// splitName maps a workspace name to its components: "/workspace/a/b",
// "a/b" and "./a//b" all give [a b]; "", "." and "/workspace" give none.
func splitName(name string) ([]string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("%q contains a NUL byte; remove it: %w", name, ErrPathEscapes)
	}
	rel := name
	if path.IsAbs(name) {
		rest, ok := strings.CutPrefix(name, ContainerWorkdir)
		if !ok || rest != "" && rest[0] != '/' {
			return nil, fmt.Errorf("%q is outside %s; use a name relative to the workspace or under %s/: %w",
				name, ContainerWorkdir, ContainerWorkdir, ErrPathEscapes)
		}
		rel = strings.TrimLeft(rest, "/")
	}
	// Lexical cleaning is sound here because no symbolic link is ever
	// followed: "a/../b" can only mean "b".
	clean := path.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, fmt.Errorf("%q climbs out of the workspace with \"..\"; name a path inside it: %w", name, ErrPathEscapes)
	}
	if clean == "." {
		return nil, nil
	}
	return strings.Split(clean, "/"), nil
}

// resolve validates name and opens its parent directory, refusing symbolic
// links in every component; create makes missing parents.
func (w *Workspace) resolve(name string, create bool) (*resolved, error) {
	return w.resolveWalk(name, create, false)
}

// resolveWalk is resolve; repair replaces parents that are not directories
// (see openDirs).
func (w *Workspace) resolveWalk(name string, create, repair bool) (*resolved, error) {
	parts, err := splitName(name)
	if err != nil {
		return nil, err
	}
	display := strings.Join(parts, "/")
	if display == "" {
		return &resolved{display: ".", dir: w.root, fd: w.rootFD}, nil
	}
	p, err := w.openDir(display, parts[:len(parts)-1], create, repair)
	if err != nil {
		return nil, err
	}
	p.base, p.slash = parts[len(parts)-1], strings.HasSuffix(name, "/")
	return p, nil
}

// openDir opens the directory dirs (components below the root) as an
// os.Root. os.Root cannot do the walk itself: it follows links that stay
// inside it, and it opens a last component without O_DIRECTORY, which
// blocks forever on a FIFO swapped in by the sandbox. So the walk opens one
// component at a time with openat(O_DIRECTORY|O_NOFOLLOW|O_NONBLOCK) from
// the root's descriptor (a component is never "..", so it cannot leave the
// directory it is opened in), and the os.Root for the directory reached is
// opened through its descriptor's /proc/self/fd entry, which names that
// very directory however the tree changes.
func (w *Workspace) openDir(display string, dirs []string, create, repair bool) (*resolved, error) {
	if display == "" {
		display = "."
	}
	if len(dirs) == 0 {
		return &resolved{display: display, dir: w.root, fd: w.rootFD}, nil
	}
	fd, err := openDirs(w.rootFD, display, dirs, create, repair, [2]int{w.opts.UID, w.opts.GID})
	if err != nil {
		return nil, err
	}
	return &resolved{display: display, fd: fd, owned: true}, nil
}

// errChanged reports an entry that changed between its lstat and its
// open: replaced by a rename (an atomic write in the sandbox) or swapped
// for a link. The caller retries; a link is then refused by the lstat.
var errChanged = errors.New("changed while being opened; retry, and do not swap files or directories for links")

// openTries bounds the retries after errChanged.
const openTries = 5

// openFinal opens the final component of p read-only and non-blocking and
// checks that it is a regular file (or directory when dir) and the same
// object an lstat saw, so a FIFO never blocks and a link is never followed.
func (w *Workspace) openFinal(p *resolved, dir bool) (*os.File, fs.FileInfo, error) {
	for try := 1; ; try++ {
		f, fi, err := w.openFinalOnce(p, dir)
		if !errors.Is(err, errChanged) || try == openTries {
			return f, fi, err
		}
	}
}

func (w *Workspace) openFinalOnce(p *resolved, dir bool) (*os.File, fs.FileInfo, error) {
	lstat, open := finalAt(p.fd)
	if lstat == nil {
		root, err := p.root()
		if err != nil {
			return nil, nil, err
		}
		lstat = root.Lstat
		open = func(name string) (*os.File, error) {
			return root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
		}
	}
	fi, err := lstat(p.base)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.display, mapErr(err))
	}
	if err := checkType(p.display, fi, dir, false); err != nil {
		return nil, nil, err
	}
	f, err := open(p.base)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.display, mapErr(err))
	}
	st, err := f.Stat()
	if err == nil && !sameFile(fi, st) {
		err = fmt.Errorf("%s %w", p.display, errChanged)
	} else if err == nil {
		err = checkType(p.display, st, dir, false)
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// writeAtomic writes data to p via a temporary file and a rename; keep
// keeps an existing file's mode and owner.
func (w *Workspace) writeAtomic(p *resolved, data []byte, keep bool) error {
	// Owner only: the sandbox user reads it in the container; no other
	// host account needs it.
	mode := fs.FileMode(0o600)
	uid, gid := w.opts.UID, w.opts.GID
	keepMode := false
	dir, err := p.root()
	if err != nil {
		return err
	}
	fi, err := dir.Lstat(p.base)
	switch {
	case err == nil && !keep:
		// Replaced whatever it is: RestoreFile removed all but a file.
	case err == nil:
		if err := checkType(p.display, fi, false, false); err != nil {
			return err
		}
		mode, keepMode = fi.Mode().Perm(), true
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", p.display, mapErr(err))
	}

	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".agentbox-tmp-" + hex.EncodeToString(rnd[:])
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return fmt.Errorf("%s: create temporary file: %w", p.display, mapErr(err))
	}
	fail := func(err error) error {
		_ = f.Close()
		_ = dir.Remove(tmp)
		return err
	}
	if _, err := f.Write(data); err != nil {
		return fail(fmt.Errorf("%s: %w", p.display, err))
	}
	if keepMode {
		// The umask may have narrowed the mode at creation.
		if err := f.Chmod(mode); err != nil {
			return fail(fmt.Errorf("%s: keep mode %v: %w", p.display, mode, err))
		}
	}
	if uid != -1 && uid == os.Geteuid() {
		uid = -1
	}
	if gid != -1 && gid == os.Getegid() {
		gid = -1
	}
	if uid != -1 || gid != -1 {
		if err := f.Chown(uid, gid); err != nil {
			return fail(fmt.Errorf("%s: give file to %d:%d (the gateway must run as root or as the sandbox user): %w", p.display, uid, gid, err))
		}
	}
	if err := f.Close(); err != nil {
		_ = dir.Remove(tmp)
		return fmt.Errorf("%s: %w", p.display, err)
	}
	if err := dir.Rename(tmp, p.base); err != nil {
		_ = dir.Remove(tmp)
		return fmt.Errorf("%s: %w", p.display, mapErr(err))
	}
	return nil
}

// checkType refuses links (ErrPathEscapes) and anything but a directory
// (when dir) or a regular file (otherwise; either when either).
func checkType(display string, fi fs.FileInfo, dir, either bool) error {
	t := fi.Mode().Type()
	switch {
	case t&fs.ModeSymlink != 0:
		return fmt.Errorf("%s: %q is a symbolic link; links are never followed in the workspace, name the target instead: %w",
			display, fi.Name(), ErrPathEscapes)
	case t == fs.ModeDir && (dir || either), t == 0 && (!dir || either):
		return nil
	case t == fs.ModeDir:
		return fmt.Errorf("%s: %q is a directory, not a file; use ListDir: %w", display, fi.Name(), ErrInvalid)
	case t == 0:
		return fmt.Errorf("%s: %q is a file, not a directory: %w", display, fi.Name(), ErrInvalid)
	default:
		return fmt.Errorf("%s: %q is a %s, not a regular file or directory; only those are accessible: %w",
			display, fi.Name(), typeName(t), ErrInvalid)
	}
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}

// mapErr adds this package's sentinels to os errors callers branch on.
func mapErr(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w (%w)", ErrPathEscapes, err)
	case err != nil && strings.Contains(err.Error(), "path escapes from parent"):
		// os.Root's own escape error is unexported.
		return fmt.Errorf("%w (%w)", ErrPathEscapes, err)
	}
	return err
}

func toFileInfo(name string, fi fs.FileInfo) FileInfo {
	return FileInfo{Name: name, Size: fi.Size(), IsDir: fi.IsDir(), ModTime: fi.ModTime()}
}
