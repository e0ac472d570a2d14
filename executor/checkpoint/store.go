package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of Options.
const (
	DefaultMaxCheckpoints       = 50
	DefaultMaxBytes       int64 = 2 << 30
)

// Errors callers branch on.
var (
	// ErrTooLarge: a checkpoint's new content alone passes Options.MaxBytes.
	ErrTooLarge = errors.New("checkpoint: the workspace's changes are larger than the checkpoint bound")
	// ErrNotFound: no checkpoint has the id (never taken, or evicted).
	ErrNotFound = errors.New("checkpoint: no such checkpoint")
)

// Options bound a Store and say who owns what Restore writes.
type Options struct {
	// MaxCheckpoints is how many checkpoints the Store keeps (default
	// DefaultMaxCheckpoints); the oldest go first.
	MaxCheckpoints int
	// MaxBytes bounds the Store's disk use, objects and manifests
	// (default DefaultMaxBytes); the oldest checkpoints go first.
	MaxBytes int64
	// UID and GID own the files and directories Restore makes (the
	// sandbox user); -1 keeps the gateway's.
	UID, GID int
}

// Kind is what an Entry is.
type Kind string

// Kinds of Entry.
const (
	KindDir  Kind = "dir"
	KindFile Kind = "file"
	KindLink Kind = "link"
)

// Entry is one path of a checkpoint.
type Entry struct {
	// Path is relative to the workspace, '/'-separated; its components
	// may hold any byte but '/' and NUL.
	Path string
	Kind Kind
	// Mode holds the permission bits.
	Mode fs.FileMode
	// Size and Hash (SHA-256, hex) are a file's; Target is a link's.
	Size   int64
	Hash   string
	Target string
	// MTime is the modification time, restored with the content.
	MTime time.Time
	// Ino and CTime tell, at the next checkpoint, that a file did not
	// change (with Size and MTime); they are not restored.
	Ino   uint64
	CTime int64
}

// Skipped is a path Take did not keep: a FIFO, a device or a socket.
type Skipped struct {
	Path string
	What string
}

// Manifest is one checkpoint.
type Manifest struct {
	// ID is the checkpoint's id; Parent the checkpoint it was taken after
	// ("" for the first).
	ID, Parent string
	// Label is the caller's (a turn, say).
	Label   string
	Created time.Time
	// Entries are sorted by Path.
	Entries []Entry
	Skipped []Skipped
	// Files and Bytes count the files and their bytes; Changed counts
	// the paths added, changed or removed since Parent; NewBytes is what
	// the checkpoint added to the store.
	Files, Changed  int
	Bytes, NewBytes int64
}

// Summary is a checkpoint without its entries, for listings: the
// executor's CheckpointInfo.
type Summary = executor.CheckpointInfo

func (m *Manifest) summary() Summary {
	return Summary{ID: m.ID, Parent: m.Parent, Label: m.Label, Created: m.Created, Files: m.Files, Bytes: m.Bytes,
		Changed: m.Changed, NewBytes: m.NewBytes, Skipped: len(m.Skipped)}
}

// Store is one chat's checkpoints. See the package documentation.
type Store struct {
	dir string
	o   Options
}

// Names in a Store's directory.
const (
	objectsDir   = "objects"
	manifestsDir = "manifests"
	tmpDir       = "tmp"
	indexName    = "index.json"
)

// Open opens (creating it, mode 0700) the Store in dir, a directory no
// sandbox can reach, and removes what an interrupted Take left.
func Open(dir string, o Options) (*Store, error) {
	if o.MaxCheckpoints <= 0 {
		o.MaxCheckpoints = DefaultMaxCheckpoints
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	for _, d := range []string{dir, filepath.Join(dir, objectsDir), filepath.Join(dir, manifestsDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("checkpoint: open the store: %w", err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, tmpDir)); err != nil {
		return nil, fmt.Errorf("checkpoint: clear the store's temporary files: %w", err)
	}
	if err := os.Mkdir(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: open the store: %w", err)
	}
	return &Store{dir: dir, o: o}, nil
}

// indexFile is the Store's index: its checkpoints, oldest first, and
// the bytes the store holds (allocated, objects and manifests), kept as
// checkpoints come and go so that a checkpoint need not walk the store.
type indexFile struct {
	Used        int64     `json:"used"`
	Checkpoints []Summary `json:"checkpoints"`
	// Evicted counts the checkpoints dropped since the last collection:
	// their manifests are gone, their objects may not be (Used counts
	// them still).
	Evicted int `json:"evicted,omitempty"`
}

// collectEvery is how many checkpoints may be evicted for the count bound
// before their objects are collected. A collection reads every kept
// manifest, 50 of 20,000 entries each by default, which would otherwise
// be paid by every take of a chat past MaxCheckpoints turns; the byte
// bound still collects at once when the room is needed.
const collectEvery = 8

func (s *Store) readIndex() (indexFile, error) {
	var idx indexFile
	b, err := os.ReadFile(filepath.Join(s.dir, indexName))
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, fmt.Errorf("checkpoint: read the index: %w", err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("checkpoint: the index is damaged: %w", err)
	}
	return idx, nil
}

// List returns the Store's checkpoints, oldest first.
func (s *Store) List() ([]Summary, error) {
	idx, err := s.readIndex()
	return idx.Checkpoints, err
}

// Used is the disk space the Store holds, in bytes.
func (s *Store) Used() (int64, error) {
	idx, err := s.readIndex()
	return idx.Used, err
}

// Latest is the newest checkpoint's summary, or false.
func (s *Store) Latest() (Summary, bool, error) {
	list, err := s.List()
	if err != nil || len(list) == 0 {
		return Summary{}, false, err
	}
	return list[len(list)-1], true, nil
}

// Manifest reads checkpoint id. The caller may change what it returns.
func (s *Store) Manifest(id string) (*Manifest, error) {
	m, err := s.manifest(id)
	if err != nil {
		return nil, err
	}
	c := *m
	c.Entries, c.Skipped = slices.Clone(m.Entries), slices.Clone(m.Skipped)
	return &c, nil
}

// manifest reads checkpoint id through the cache of recent manifests;
// what it returns is shared and must not be changed.
func (s *Store) manifest(id string) (*Manifest, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	p := filepath.Join(s.dir, manifestsDir, id)
	if m := recent.get(p); m != nil {
		return m, nil
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", id, err)
	}
	defer func() { _ = f.Close() }()
	m, err := decodeManifest(f)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", id, err)
	}
	recent.put(p, m)
	return m, nil
}

// recent holds the manifests last read or written, by path. A manifest
// never changes once written (its id is new), so a cached one is never
// stale; the next Take reads the newest and a Restore the newest and its
// target, which saves decoding 20,000 entries twice (about 10 ms each).
// It holds at most recentMax manifests of at most recentEntries entries,
// which bounds its memory (about 150 bytes an entry).
var recent = &manifestCache{}

const (
	recentMax     = 8
	recentEntries = 1 << 20
)

type manifestCache struct {
	mu   sync.Mutex
	keys []string // oldest first
	ms   map[string]*Manifest
	n    int // entries held
	// idx holds the index of a cached manifest once asked for: a Take
	// looks up its previous one, a Restore its target and the newest
	// (building 20,000 entries' map takes a millisecond or two).
	idx map[*Manifest]map[string]*Entry
}

// holds reports whether m is cached; the caller holds c.mu.
func (c *manifestCache) holds(m *Manifest) bool {
	for _, cm := range c.ms {
		if cm == m {
			return true
		}
	}
	return false
}

// index is m's index (see index), kept while m is cached.
func (c *manifestCache) index(m *Manifest) map[string]*Entry {
	if m == nil {
		return nil
	}
	c.mu.Lock()
	idx, ok := c.idx[m]
	cached := c.holds(m)
	c.mu.Unlock()
	if ok {
		return idx
	}
	idx = index(m)
	if cached {
		c.mu.Lock()
		if c.holds(m) {
			if c.idx == nil {
				c.idx = map[*Manifest]map[string]*Entry{}
			}
			c.idx[m] = idx
		}
		c.mu.Unlock()
	}
	return idx
}

func (c *manifestCache) get(p string) *Manifest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ms[p]
}

func (c *manifestCache) put(p string, m *Manifest) {
	if len(m.Entries) > recentEntries {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ms == nil {
		c.ms = map[string]*Manifest{}
	}
	if _, ok := c.ms[p]; ok {
		return
	}
	for len(c.keys) > 0 && (len(c.keys) >= recentMax || c.n+len(m.Entries) > recentEntries) {
		c.n -= len(c.ms[c.keys[0]].Entries)
		delete(c.idx, c.ms[c.keys[0]])
		delete(c.ms, c.keys[0])
		c.keys = c.keys[1:]
	}
	c.keys = append(c.keys, p)
	c.ms[p] = m
	c.n += len(m.Entries)
}

// drop forgets the manifest at path, and those below it (a removed
// Store).
func (c *manifestCache) drop(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = slices.DeleteFunc(c.keys, func(p string) bool {
		if p != path && !strings.HasPrefix(p, path+string(filepath.Separator)) {
			return false
		}
		c.n -= len(c.ms[p].Entries)
		delete(c.idx, c.ms[p])
		delete(c.ms, p)
		return true
	})
}

// Remove deletes the Store with every checkpoint (the workspace's
// retention).
func (s *Store) Remove() error {
	recent.drop(s.dir)
	return os.RemoveAll(s.dir)
}

// newID returns a checkpoint id: its time, sortable, and a random tail.
func newID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("ck_%013d%s", now.UnixMilli(), hex.EncodeToString(b[:]))
}

// validID reports whether id is one newID could have made: it names a
// file in manifests/.
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, "ck_")
	if !ok || len(rest) != 21 {
		return false
	}
	for _, c := range rest {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// publish writes m's manifest and adds it to the index, then applies the
// bounds: the oldest checkpoints go until both hold, with the objects no
// remaining checkpoint uses.
func (s *Store) publish(m *Manifest) error {
	tmp, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "manifest")
	if err != nil {
		return fmt.Errorf("checkpoint: write the manifest: %w", err)
	}
	err = encodeManifest(tmp, m)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	dst := filepath.Join(s.dir, manifestsDir, m.ID)
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("checkpoint: write the manifest: %w", err)
	}
	recent.put(dst, m)
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	idx.Checkpoints = append(idx.Checkpoints, m.summary())
	idx.Used += m.NewBytes + allocated(dst)
	if n := len(idx.Checkpoints) - s.o.MaxCheckpoints; n > 0 {
		// The oldest go now, manifests first (a Restore of them fails
		// at once); their objects wait for the next collection.
		for _, sm := range idx.Checkpoints[:n] {
			p := filepath.Join(s.dir, manifestsDir, sm.ID)
			held := allocated(p)
			recent.drop(p)
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("checkpoint: drop %s: %w", sm.ID, err)
			}
			idx.Used -= held
		}
		idx.Checkpoints = idx.Checkpoints[n:]
		idx.Evicted += n
	}
	if idx.Used <= s.o.MaxBytes && idx.Evicted < collectEvery {
		return s.writeIndex(idx)
	}
	return s.bound(idx.Checkpoints)
}

// bound writes list as the index, drops the manifests it no longer has
// and collects their objects, then drops the oldest checkpoints while the
// store passes MaxBytes (never the newest: Take refuses one that alone
// passes it).
func (s *Store) bound(list []Summary) error {
	for {
		used, err := s.collect(list)
		if err != nil {
			return err
		}
		if used <= s.o.MaxBytes || len(list) <= 1 {
			return s.writeIndex(indexFile{Used: used, Checkpoints: list})
		}
		list = list[1:]
	}
}

func (s *Store) writeIndex(idx indexFile) error {
	b, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, tmpDir, indexName)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("checkpoint: write the index: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, indexName)); err != nil {
		return fmt.Errorf("checkpoint: write the index: %w", err)
	}
	return nil
}

// collect removes the manifests list does not hold and the objects none of
// list's checkpoints uses, and returns the bytes the store then holds
// (allocated, manifests included).
func (s *Store) collect(list []Summary) (int64, error) {
	keep := map[string]bool{}
	live := map[string]bool{}
	for _, sm := range list {
		keep[sm.ID] = true
		m, err := s.manifest(sm.ID)
		if err != nil {
			return 0, err
		}
		for _, e := range m.Entries {
			if e.Kind == KindFile {
				live[e.Hash] = true
			}
		}
	}
	var used int64
	mdir := filepath.Join(s.dir, manifestsDir)
	names, err := readNames(mdir)
	if err != nil {
		return 0, err
	}
	for _, n := range names {
		p := filepath.Join(mdir, n)
		if !keep[n] {
			recent.drop(p)
			if err := os.Remove(p); err != nil {
				return 0, fmt.Errorf("checkpoint: drop %s: %w", n, err)
			}
			continue
		}
		used += allocated(p)
	}
	odir := filepath.Join(s.dir, objectsDir)
	shards, err := readNames(odir)
	if err != nil {
		return 0, err
	}
	for _, shard := range shards {
		objs, err := readNames(filepath.Join(odir, shard))
		if err != nil {
			return 0, err
		}
		for _, o := range objs {
			p := filepath.Join(odir, shard, o)
			if !live[o] {
				if err := os.Remove(p); err != nil {
					return 0, fmt.Errorf("checkpoint: drop an object: %w", err)
				}
				continue
			}
			used += allocated(p)
		}
	}
	return used, nil
}

// readNames lists dir's names, sorted.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// Take checkpoints the workspace at ws (a host directory), labelled
// label, and returns its manifest. Its parent is the checkpoint the
// workspace was last restored to, else the newest; files unchanged since
// the newest are not read again.
func (s *Store) Take(ctx context.Context, ws, label string) (*Manifest, error) {
	var prev *Manifest
	var err error
	if latest, ok, lerr := s.Latest(); lerr != nil {
		return nil, lerr
	} else if ok {
		if prev, err = s.manifest(latest.ID); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	m := &Manifest{ID: newID(now), Label: label, Created: now, Parent: s.head()}
	if m.Parent == "" && prev != nil {
		m.Parent = prev.ID
	}
	t := &taker{s: s, ctx: ctx, m: m, prev: recent.index(prev)}
	if err := t.walk(ws); err != nil {
		// What it stored goes again: no checkpoint uses it.
		if list, lerr := s.List(); lerr == nil {
			_ = s.bound(list)
		}
		return nil, err
	}
	// The walk lays the entries out sorted by path.
	slices.SortFunc(m.Skipped, func(a, b Skipped) int { return strings.Compare(a.Path, b.Path) })
	for i := range m.Entries {
		if m.Entries[i].Kind == KindFile {
			m.Files++
			m.Bytes += m.Entries[i].Size
		}
	}
	parent := prev
	if prev != nil && m.Parent != prev.ID {
		if p, err := s.manifest(m.Parent); err == nil {
			parent = p
		}
	}
	m.Changed = changed(parent, m)
	if err := s.publish(m); err != nil {
		return nil, err
	}
	if err := s.setHead(m.ID); err != nil {
		return nil, err
	}
	return m, nil
}

// headName holds the checkpoint the workspace was last made or taken
// from: the parent of the next checkpoint.
const headName = "head"

// head is the checkpoint the workspace was last restored to or taken as,
// or "".
func (s *Store) head() string {
	b, err := os.ReadFile(filepath.Join(s.dir, headName))
	if err != nil || !validID(string(b)) {
		return ""
	}
	return string(b)
}

func (s *Store) setHead(id string) error {
	tmp := filepath.Join(s.dir, tmpDir, headName)
	if err := os.WriteFile(tmp, []byte(id), 0o600); err != nil {
		return fmt.Errorf("checkpoint: record the head: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, headName)); err != nil {
		return fmt.Errorf("checkpoint: record the head: %w", err)
	}
	return nil
}

// index maps a manifest's paths to their entries.
func index(m *Manifest) map[string]*Entry {
	if m == nil {
		return nil
	}
	idx := make(map[string]*Entry, len(m.Entries))
	for i := range m.Entries {
		idx[m.Entries[i].Path] = &m.Entries[i]
	}
	return idx
}

// changed counts the paths added, changed (content, kind, mode or
// target) or removed from a to b, both sorted by path: a merge of the
// two, no lookup.
func changed(a, b *Manifest) int {
	if a == nil {
		return len(b.Entries)
	}
	n, i, j := 0, 0, 0
	for i < len(a.Entries) || j < len(b.Entries) {
		switch {
		case j == len(b.Entries) || i < len(a.Entries) && a.Entries[i].Path < b.Entries[j].Path:
			n, i = n+1, i+1 // removed
		case i == len(a.Entries) || b.Entries[j].Path < a.Entries[i].Path:
			n, j = n+1, j+1 // added
		default:
			if !sameContent(&a.Entries[i], &b.Entries[j]) {
				n++
			}
			i, j = i+1, j+1
		}
	}
	return n
}

// sameContent reports whether two entries of one path hold the same
// thing, times apart.
func sameContent(a, b *Entry) bool {
	return a.Kind == b.Kind && a.Mode == b.Mode && a.Hash == b.Hash && a.Target == b.Target
}
