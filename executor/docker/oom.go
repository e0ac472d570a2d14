package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// oomCounter reads how many times the kernel's OOM killer acted in the
// container's memory cgroup. Measured on this project's daemon (20.10,
// cgroup v1): State.OOMKilled only covers the main process, so a memory
// bomb in an exec is seen only through the cgroup's oom_kill counter
// (memory.oom_control on v1, memory.events on v2).
type oomCounter interface {
	count(ctx context.Context) (int64, error)
}

// hostOOMCounter reads the counter from the host's cgroup filesystem: a
// file read instead of an exec, possible when the gateway runs on the
// daemon's host (same pid namespace and /sys/fs/cgroup).
type hostOOMCounter struct{ file string }

func (h hostOOMCounter) count(context.Context) (int64, error) {
	data, err := os.ReadFile(h.file)
	if err != nil {
		return 0, err
	}
	return parseOOMKill(data)
}

// execOOMCounter reads the counter from inside the container (whose
// /sys/fs/cgroup shows its own cgroup) with an exec.
type execOOMCounter struct{ d *dockerExec }

// oomReadCmd prints the v1 and v2 counter files, whichever exist.
var oomReadCmd = []string{"/bin/sh", "-c", "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null; true"}

func (e execOOMCounter) count(ctx context.Context) (int64, error) {
	code, out, err := e.d.simple(ctx, oomReadCmd, nil)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("reading the oom counter exited %d: %s", code, bytes.TrimSpace(out))
	}
	return parseOOMKill(out)
}

// errNoOOMCounter: the cgroup files have no oom_kill line (old kernel).
var errNoOOMCounter = errors.New("no oom_kill counter in the memory cgroup")

// parseOOMKill finds "oom_kill N" in memory.oom_control or memory.events.
func parseOOMKill(data []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if ok && k == "oom_kill" {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errNoOOMCounter
}

// hostCgroupFile finds the OOM counter file of container id, whose main
// process is pid in the daemon's pid namespace, on this host, or "" when it
// is not reachable. The cgroup path must name the container, so a pid that
// means another process here (gateway in its own pid namespace) is not used.
func hostCgroupFile(pid int, id string) string {
	if pid <= 0 || id == "" {
		return ""
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], id) {
			continue
		}
		var file string
		switch {
		case parts[1] == "memory" || strings.Contains(","+parts[1]+",", ",memory,"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.oom_control")
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.events")
		default:
			continue
		}
		if data, err := os.ReadFile(file); err == nil {
			if _, err := parseOOMKill(data); err == nil {
				return file
			}
		}
	}
	return ""
}
