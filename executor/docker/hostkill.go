package docker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostKiller stops an exec's processes from the host, without an exec: it
// lists the container's processes in its cgroup (host pids), finds those
// whose environment carries the exec's token and every process in their
// sessions, and signals them directly. It works when the pids limit is
// exhausted (no exec can start then) and saves a docker exec per stop. It
// is used only when the gateway runs on the daemon's host in its pid
// namespace with the rights to read other users' /proc/<pid>/environ
// (root); otherwise the kill script runs by exec.
type hostKiller struct {
	procsFile string // the container cgroup's cgroup.procs
	grace     time.Duration
}

// newHostKiller returns a killer for the cgroup whose OOM counter file is
// oomFile, or nil when its process list is not readable.
func newHostKiller(oomFile string, grace time.Duration) *hostKiller {
	f := filepath.Join(filepath.Dir(oomFile), "cgroup.procs")
	if _, err := os.ReadFile(f); err != nil {
		return nil
	}
	return &hostKiller{procsFile: f, grace: grace}
}

// kill sends SIGTERM, waits up to the grace, then SIGKILL until nothing of
// the exec is left. It fails when a process could not be inspected or
// signalled, so that the caller falls back to the kill script.
func (h *hostKiller) kill(token string) error {
	n, err := h.sweep(token, syscall.SIGTERM)
	if err != nil || n == 0 {
		return err
	}
	for deadline := time.Now().Add(h.grace); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if n, err = h.sweep(token, 0); err != nil || n == 0 {
			return err
		}
	}
	for range 200 {
		if n, err = h.sweep(token, syscall.SIGKILL); err != nil || n == 0 {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%d processes of the exec survived SIGKILL", n)
}

// sweep signals (0: only counts) the live processes of the exec and of
// their sessions, and returns how many it found.
func (h *hostKiller) sweep(token string, sig syscall.Signal) (int, error) {
	data, err := os.ReadFile(h.procsFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil // the container is gone
		}
		return 0, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	marker := []byte(execTokenVar + "=" + token)
	sids := map[int]bool{}
	hit := map[int]bool{}
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue
			}
			return 0, err
		}
		if !hasEnvEntry(env, marker) {
			continue
		}
		if state, sid, ok := procStat(pid); ok && state != "Z" {
			hit[pid] = true
			sids[sid] = true
		}
	}
	if len(hit) == 0 {
		return 0, nil
	}
	for _, pid := range pids {
		if !hit[pid] {
			state, sid, ok := procStat(pid)
			if !ok || state == "Z" || !sids[sid] {
				continue
			}
			hit[pid] = true
		}
	}
	for pid := range hit {
		if sig != 0 {
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				return 0, err
			}
		}
	}
	return len(hit), nil
}

// hasEnvEntry reports whether the NUL-separated environment holds entry.
func hasEnvEntry(env, entry []byte) bool {
	for len(env) > 0 {
		kv := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			kv, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if bytes.Equal(kv, entry) {
			return true
		}
	}
	return false
}

// procStat returns a process's state and session id from /proc/<pid>/stat.
func procStat(pid int) (string, int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. Then: state ppid pgrp session.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 4 {
		return "", 0, false
	}
	sid, err := strconv.Atoi(f[3])
	return f[0], sid, err == nil
}
