package executor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Layout of the workspaces under a data directory.
//
// A container sees the host path of its workspace bind mount in
// /proc/self/mountinfo (the mount's root within its filesystem), so the
// directory names carry no tenant identifier: a chat's workspace is
// {data}/ws/{name}, where name is a keyed hash (HMAC-SHA256, 128 bits in
// hex) of the user and chat ids under WorkspaceKeyFile, a random per-data-dir
// secret. Without the key nobody can tell whose workspace a name is, nor
// whether two names belong to the same user; with it, the host maps ids to
// names and never needs the reverse.
const (
	// WorkspacesDir holds the workspaces, one directory per chat, below
	// the data directory.
	WorkspacesDir = "ws"
	// WorkspaceKeyFile is the data directory's secret (mode 0600) that
	// names the workspaces. Losing it orphans every workspace: back it up
	// with the data.
	WorkspaceKeyFile = "workspace.key"
	// LegacyWorkspacesDir held {user}/chat-{chat} workspaces before
	// neutral names; PrepareWorkspace moves them on first use.
	LegacyWorkspacesDir = "workspaces"
)

const workspaceKeyLen = 32

// WorkspaceLayout names the chats' workspaces of one data directory. It is
// immutable and safe for concurrent use.
type WorkspaceLayout struct {
	dataDir string
	key     []byte
}

// OpenWorkspaceLayout reads the data directory's WorkspaceKeyFile, creating
// it (with the data directory) when there is none. Concurrent first calls,
// in this process or another, agree on one key: it is written under a
// temporary name and linked into place, and whoever loses the race reads
// the winner's.
func OpenWorkspaceLayout(dataDir string) (*WorkspaceLayout, error) {
	if dataDir == "" {
		return nil, fmt.Errorf("workspace layout: data directory is empty; configure one: %w", ErrInvalid)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("workspace layout: create data directory: %w", err)
	}
	root, err := os.OpenRoot(dataDir)
	if err != nil {
		return nil, fmt.Errorf("workspace layout: open data directory: %w", err)
	}
	defer func() { _ = root.Close() }()
	key, err := readKey(root)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = createKey(root)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace layout: %s: %w", filepath.Join(dataDir, WorkspaceKeyFile), err)
	}
	return &WorkspaceLayout{dataDir: dataDir, key: key}, nil
}

func readKey(root *os.Root) ([]byte, error) {
	f, err := root.OpenFile(WorkspaceKeyFile, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != workspaceKeyLen {
		return nil, fmt.Errorf("not a %d-byte regular file (mode %v, %d bytes); restore it from a backup, or remove it and the workspaces it named: %w", workspaceKeyLen, fi.Mode(), fi.Size(), ErrInvalid)
	}
	key := make([]byte, workspaceKeyLen)
	if _, err := f.ReadAt(key, 0); err != nil {
		return nil, err
	}
	return key, nil
}

func createKey(root *os.Root) ([]byte, error) {
	key := make([]byte, workspaceKeyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmp := WorkspaceKeyFile + ".tmp-" + hex.EncodeToString(suffix[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = root.Remove(tmp) }()
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	// link never replaces: a key someone else put in place first wins.
	if err := root.Link(tmp, WorkspaceKeyFile); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKey(root)
		}
		return nil, err
	}
	return key, nil
}

// Name returns the chat's workspace directory name within WorkspacesDir.
// The ids are not validated: callers validate them first.
func (l *WorkspaceLayout) Name(user, chat string) string {
	m := hmac.New(sha256.New, l.key)
	// Length-prefixed: no pair of ids can produce another pair's input.
	_, _ = fmt.Fprintf(m, "agentbox-workspace\x00%d:%s\x00%d:%s", len(user), user, len(chat), chat)
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Rel returns the chat's workspace relative to the data directory.
func (l *WorkspaceLayout) Rel(user, chat string) string {
	return filepath.Join(WorkspacesDir, l.Name(user, chat))
}

// Dir returns the chat's workspace's host path.
func (l *WorkspaceLayout) Dir(user, chat string) string {
	return filepath.Join(l.dataDir, l.Rel(user, chat))
}

// LegacyRel is where a chat's workspace was before neutral names,
// relative to the data directory.
func LegacyRel(user, chat string) string {
	return filepath.Join(LegacyWorkspacesDir, user, "chat-"+chat)
}

// WorkspaceDir returns the host path of a chat's workspace in dataDir (it
// exists once PrepareWorkspace made it), creating the data directory's key
// when there is none.
func WorkspaceDir(dataDir, user, chat string) (string, error) {
	if err := ValidateID("user id", user); err != nil {
		return "", err
	}
	if err := ValidateID("chat id", chat); err != nil {
		return "", err
	}
	l, err := OpenWorkspaceLayout(dataDir)
	if err != nil {
		return "", err
	}
	return l.Dir(user, chat), nil
}

// migrate moves the chat's legacy workspace to its neutral name when only
// the legacy one exists (rename, never copy: a large workspace moves at
// once and nothing is left half-copied), then removes the legacy user
// directory once empty. A legacy entry that is not a real directory is
// left alone and the chat starts with a new workspace.
func (l *WorkspaceLayout) migrate(root *os.Root, user, chat string) error {
	name := l.Rel(user, chat)
	if _, err := root.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	legacy := LegacyRel(user, chat)
	fi, err := root.Lstat(legacy)
	if err != nil || !fi.IsDir() {
		return nil
	}
	if err := root.MkdirAll(WorkspacesDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", WorkspacesDir, err)
	}
	if err := root.Rename(legacy, name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another gateway moved it first
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("move the workspace %s to %s (a mount on it, or %s on another filesystem? unmount it or move it by hand): %w",
			filepath.Join(l.dataDir, legacy), filepath.Join(l.dataDir, name), WorkspacesDir, err)
	}
	_ = root.Remove(filepath.Join(LegacyWorkspacesDir, user))
	return nil
}

// ReadDirNoFollow lists dir under root, refusing (ErrPathEscapes) a dir
// that is not a directory itself, a symlink to one included: the sweeps
// of what chats leave on the host walk with it and never follow a link.
func ReadDirNoFollow(root *os.Root, dir string) ([]fs.DirEntry, error) {
	fi, err := root.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory: %w", dir, ErrPathEscapes)
	}
	f, err := root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return f.ReadDir(-1)
}
