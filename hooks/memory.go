package hooks

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Default caps of a MemoryStore.
const (
	DefaultMaxKeys  = 1024
	DefaultMaxBytes = 1 << 20
)

// ErrMemoryFull is returned by Store.Set past the store's caps.
var ErrMemoryFull = errors.New("hooks: memory store is full")

// MemoryStore is a bounded in-memory Store, safe for concurrent use.
type MemoryStore struct {
	mu       sync.Mutex
	values   map[string]json.RawMessage
	bytes    int
	maxKeys  int
	maxBytes int
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store holding at most maxKeys keys and
// maxBytes bytes of keys plus values (<= 0 selects the defaults).
func NewMemoryStore(maxKeys, maxBytes int) *MemoryStore {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &MemoryStore{values: map[string]json.RawMessage{}, maxKeys: maxKeys, maxBytes: maxBytes}
}

// Get implements Store.
func (s *MemoryStore) Get(key string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	if !ok {
		return nil, false
	}
	return append(json.RawMessage(nil), v...), true
}

// Set implements Store.
func (s *MemoryStore) Set(key string, value json.RawMessage) error {
	if !json.Valid(value) {
		return fmt.Errorf("memory set %q: value is not a JSON document; store strings, numbers, booleans, null, arrays or plain objects", key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.values[key]
	size := s.bytes + len(key) + len(value)
	if exists {
		size -= len(key) + len(old)
	} else if len(s.values) >= s.maxKeys {
		return fmt.Errorf("memory set %q: %w (%d keys); delete keys you no longer need", key, ErrMemoryFull, s.maxKeys)
	}
	if size > s.maxBytes {
		return fmt.Errorf("memory set %q: %w (%d of %d bytes); store less or delete keys", key, ErrMemoryFull, size, s.maxBytes)
	}
	s.values[key] = append(json.RawMessage(nil), value...)
	s.bytes = size
	return nil
}

// Del implements Store.
func (s *MemoryStore) Del(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.values[key]; ok {
		s.bytes -= len(key) + len(old)
		delete(s.values, key)
	}
}

// ChatMemory keeps one MemoryStore per (user, chat) so ctx.memory.chat
// survives across a chat's requests. It holds at most maxChats stores and
// forgets the least recently used one past that. Safe for concurrent use.
type ChatMemory struct {
	mu       sync.Mutex
	maxChats int
	maxKeys  int
	maxBytes int
	order    *list.List // of chatKey, front = most recent
	stores   map[chatKey]*list.Element
}

type chatKey struct{ user, chat string }

type chatEntry struct {
	key   chatKey
	store *MemoryStore
}

// NewChatMemory returns a ChatMemory of at most maxChats chats, each store
// capped at maxKeys and maxBytes (<= 0 selects defaults: 10,000 chats).
func NewChatMemory(maxChats, maxKeys, maxBytes int) *ChatMemory {
	if maxChats <= 0 {
		maxChats = 10000
	}
	return &ChatMemory{maxChats: maxChats, maxKeys: maxKeys, maxBytes: maxBytes, order: list.New(), stores: map[chatKey]*list.Element{}}
}

// For returns the store of the chat, creating it when needed.
func (m *ChatMemory) For(userID, chatID string) Store {
	k := chatKey{userID, chatID}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.stores[k]; ok {
		m.order.MoveToFront(el)
		return el.Value.(*chatEntry).store
	}
	e := &chatEntry{key: k, store: NewMemoryStore(m.maxKeys, m.maxBytes)}
	m.stores[k] = m.order.PushFront(e)
	for m.order.Len() > m.maxChats {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.stores, last.Value.(*chatEntry).key)
	}
	return e.store
}
