package local

import (
	"bufio"
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

// cgroup2Magic is statfs's f_type of a cgroup v2 filesystem.
const cgroup2Magic = 0x63677270

// cgroupBase is where sandboxes' cgroups are made: one directory per
// controller (v1) or one (v2), each below this process's own cgroup.
type cgroupBase struct {
	v2 bool
	// dirs maps a controller ("memory", "cpu", "pids"; "" for v2) to the
	// directory holding the sandboxes' cgroups.
	dirs map[string]string
}

// baseName is the directory below this process's cgroup that holds the
// sandboxes' cgroups.
const baseName = "agentbox-local"

// detectCgroups finds writable cgroup controllers below root for this
// process. It returns nil and a reason when there are none.
func detectCgroups(root string) (*cgroupBase, string) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return nil, fmt.Sprintf("no cgroup filesystem at %s (%v)", root, err)
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err.Error()
	}
	if st.Type == cgroup2Magic {
		return detectV2(root, own[""])
	}
	b := &cgroupBase{dirs: map[string]string{}}
	var why []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		path, ok := own[c]
		if !ok {
			why = append(why, c+": not mounted")
			continue
		}
		dir := filepath.Join(root, c, path, baseName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		b.dirs[c] = dir
		removeStale(dir)
	}
	if len(b.dirs) == 0 {
		return nil, "no writable cgroup v1 controller: " + strings.Join(why, "; ")
	}
	return b, strings.Join(why, "; ")
}

// detectV2 makes a sibling of this process's cgroup for the sandboxes
// (cgroup v2 lets only leaves hold processes, and this process's cgroup
// holds it) with the memory, cpu and pids controllers enabled.
func detectV2(root, own string) (*cgroupBase, string) {
	parent := filepath.Join(root, filepath.Dir(own))
	dir := filepath.Join(parent, baseName)
	ctrls, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return nil, fmt.Sprintf("cgroup v2: %v", err)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !bytes.Contains(ctrls, []byte(c)) {
			return nil, fmt.Sprintf("cgroup v2: controller %s is not delegated to %s", c, parent)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Sprintf("cgroup v2: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0o644); err != nil {
		return nil, fmt.Sprintf("cgroup v2: enable controllers in %s: %v", dir, err)
	}
	removeStale(dir)
	return &cgroupBase{v2: true, dirs: map[string]string{"": dir}}, ""
}

// cgroupName is the cgroup of sandbox id: it names the gateway process
// that made it, so that removeStale in another gateway (or another test
// binary) on the same host leaves it alone while that process lives.
func cgroupName(id string) string { return fmt.Sprintf("sb-%d-%s", os.Getpid(), id) }

// removeStale deletes the empty sandbox cgroups a killed gateway left in
// dir: those of processes that no longer exist (a cgroup with processes
// refuses removal and stays). A live gateway's cgroups are not touched,
// even empty ones it is about to fill.
func removeStale(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "sb-")
		if !e.IsDir() || !ok {
			continue
		}
		pid, _, ok := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); ok && err == nil && n > 0 {
			if _, err := os.Stat("/proc/" + pid); err == nil {
				continue // its gateway still runs
			}
		}
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
}

// ownCgroups reads /proc/self/cgroup: controller -> path ("" for v2).
func ownCgroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			out[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			out[c] = f[2]
		}
	}
	return out, nil
}

// limits names what a sandbox is held to.
type limits struct {
	memory int64
	cpus   float64
	pids   int64
}

// describe says which limits the cgroups enforce, for the start-up log.
func (b *cgroupBase) describe() string {
	if b == nil {
		return "none (rlimits only: nofile, fsize, core, nproc)"
	}
	if b.v2 {
		return "cgroup v2: memory, cpu, pids"
	}
	var cs []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		if b.dirs[c] != "" {
			cs = append(cs, c)
		}
	}
	return "cgroup v1: " + strings.Join(cs, ", ")
}

// has reports whether controller c is enforced.
func (b *cgroupBase) has(c string) bool {
	if b == nil {
		return false
	}
	if b.v2 {
		return true
	}
	return b.dirs[c] != ""
}

// sandboxCgroup is one sandbox's cgroup (one directory per v1 controller).
type sandboxCgroup struct {
	v2   bool
	dirs map[string]string
}

// create makes the sandbox's cgroups and writes its limits. Nothing is left
// behind on failure.
func (b *cgroupBase) create(id string, l limits) (*sandboxCgroup, error) {
	if b == nil {
		return nil, nil
	}
	cg := &sandboxCgroup{v2: b.v2, dirs: map[string]string{}}
	for c, base := range b.dirs {
		dir := filepath.Join(base, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, errors.Join(fmt.Errorf("create cgroup %s: %w", dir, err), cg.remove())
		}
		cg.dirs[c] = dir
	}
	period := int64(100_000)
	quota := int64(l.cpus * float64(period))
	var writes [][2]string
	if b.v2 {
		d := cg.dirs[""]
		writes = [][2]string{
			{filepath.Join(d, "memory.max"), strconv.FormatInt(l.memory, 10)},
			{filepath.Join(d, "memory.swap.max"), "0"},
			{filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", quota, period)},
			{filepath.Join(d, "pids.max"), strconv.FormatInt(l.pids, 10)},
		}
	} else {
		if d := cg.dirs["memory"]; d != "" {
			writes = append(writes,
				[2]string{filepath.Join(d, "memory.limit_in_bytes"), strconv.FormatInt(l.memory, 10)},
				[2]string{filepath.Join(d, "memory.memsw.limit_in_bytes"), strconv.FormatInt(l.memory, 10)})
		}
		if d := cg.dirs["cpu"]; d != "" {
			writes = append(writes,
				[2]string{filepath.Join(d, "cpu.cfs_period_us"), strconv.FormatInt(period, 10)},
				[2]string{filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)})
		}
		if d := cg.dirs["pids"]; d != "" {
			writes = append(writes, [2]string{filepath.Join(d, "pids.max"), strconv.FormatInt(l.pids, 10)})
		}
	}
	for _, w := range writes {
		err := os.WriteFile(w[0], []byte(w[1]), 0o644)
		if err != nil && (errors.Is(err, os.ErrNotExist) && (strings.HasSuffix(w[0], "memsw.limit_in_bytes") || strings.HasSuffix(w[0], "swap.max"))) {
			continue // no swap accounting: swap is not limited apart
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("set %s to %s: %w", w[0], w[1], err), cg.remove())
		}
	}
	return cg, nil
}

// add moves the processes into every controller's cgroup.
func (cg *sandboxCgroup) add(pids ...int) error {
	if cg == nil {
		return nil
	}
	for _, d := range cg.dirs {
		for _, pid := range pids {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				return fmt.Errorf("move pid %d into %s: %w", pid, d, err)
			}
		}
	}
	return nil
}

// oomKills reads the memory cgroup's oom_kill counter (-1 when there is
// none to read).
func (cg *sandboxCgroup) oomKills() int64 {
	if cg == nil {
		return -1
	}
	var file string
	if cg.v2 {
		file = filepath.Join(cg.dirs[""], "memory.events")
	} else if d := cg.dirs["memory"]; d != "" {
		file = filepath.Join(d, "memory.oom_control")
	} else {
		return -1
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// procs lists the processes in the cgroup.
func (cg *sandboxCgroup) procs() []int {
	var out []int
	for _, d := range cg.dirs {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// remove kills whatever is still in the cgroups and deletes them, waiting
// a little for the kernel to let the last processes go.
func (cg *sandboxCgroup) remove() error {
	if cg == nil {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	var errs []error
	for c, d := range cg.dirs {
		for {
			for _, pid := range cg.procs() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				delete(cg.dirs, c)
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
