// Package cpuprobe measures, for benchmarks, the CPU that the processes
// around a sandboxed request spend over a window: the test process (the
// in-process gateway and the scripted model), its child processes (the
// docker CLI of a bare run), dockerd, containerd, the containerd shims, runc
// and the processes inside the containers the caller owns. It polls /proc
// (utime+stime of each process, and the CPU of the children each process
// has reaped) from a goroutine locked to its own thread, whose CPU it
// subtracts from the test process's, so the probe does not count itself.
//
// Accounting: a process seen during the window counts its own CPU from its
// first to its last sighting; the CPU of a process that exited and that its
// parent reaped counts in the parent's reaped-children delta, less what was
// already counted for it while it was seen, so short processes the poll
// never saw (most runc invocations) are not lost. They are attributed to a
// group named for the parent ("runc" for a shim's children). A process whose
// reaper is not watched (a shim, reaped by pid 1) loses the CPU it spent
// after its last sighting: at most one poll interval of it.
//
// The Docker daemon and containerd are shared with whatever else runs on
// the machine: their figures are the daemon's whole cost over the window,
// which is why callers compare with a baseline measured in the same run.
package cpuprobe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Groups of processes a Report accounts separately.
const (
	GroupTest       = "test"       // the test process: in-process gateway, scripted model, client
	GroupTestChild  = "test-child" // its descendants outside containers (the docker CLI)
	GroupDockerd    = "dockerd"
	GroupContainerd = "containerd"
	GroupShim       = "shim"      // containerd-shim-runc-v2 of the caller's containers
	GroupRunc       = "runc"      // runc invocations and other unseen children of those shims
	GroupContainer  = "container" // processes inside the caller's containers
)

// Groups lists the groups in the order reports print them.
var Groups = []string{GroupTest, GroupTestChild, GroupDockerd, GroupContainerd, GroupShim, GroupRunc, GroupContainer}

// DefaultInterval is the poll period: short enough to see most shims and
// container processes before they exit, long enough that the probe costs
// little (it reads only the stat of processes it watches).
const DefaultInterval = 10 * time.Millisecond

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times; Linux fixes it
// at 100 for user space whatever the kernel's HZ.
const clockTick = 10 * time.Millisecond

// Report is the CPU spent over one window.
type Report struct {
	Wall time.Duration
	// Machine is the machine's whole non-idle CPU over the window
	// (/proc/stat), everything on it included.
	Machine time.Duration
	// Groups is the CPU per group (the Group* constants).
	Groups map[string]time.Duration
	// Probe is the CPU the probe's own thread spent; it is already taken
	// off GroupTest.
	Probe time.Duration
	// Commands is the CPU per group and command name ("group/comm"); the
	// CPU of reaped children the poll never saw is "group/(reaped)".
	Commands map[string]time.Duration
}

// Total is the sum of the groups: the CPU the request cost the processes
// around it.
func (r Report) Total() time.Duration {
	var t time.Duration
	for _, d := range r.Groups {
		t += d
	}
	return t
}

// Add sums two reports (for totals over iterations).
func (r Report) Add(o Report) Report {
	out := Report{Wall: r.Wall + o.Wall, Machine: r.Machine + o.Machine, Probe: r.Probe + o.Probe,
		Groups: map[string]time.Duration{}, Commands: map[string]time.Duration{}}
	for k, v := range r.Groups {
		out.Groups[k] += v
	}
	for k, v := range o.Groups {
		out.Groups[k] += v
	}
	for k, v := range r.Commands {
		out.Commands[k] += v
	}
	for k, v := range o.Commands {
		out.Commands[k] += v
	}
	return out
}

// String prints the groups in milliseconds.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wall %d ms, total %d ms (", r.Wall.Milliseconds(), r.Total().Milliseconds())
	for i, g := range Groups {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s %d", g, r.Groups[g].Milliseconds())
	}
	fmt.Fprintf(&b, "), machine %d ms, probe %d ms", r.Machine.Milliseconds(), r.Probe.Milliseconds())
	return b.String()
}

// Options configure a Probe.
type Options struct {
	// Interval is the poll period; DefaultInterval when zero.
	Interval time.Duration
	// Owns says whether the container with these labels is the caller's;
	// only its shim, runc calls and processes are counted. Nil counts
	// every container.
	Owns func(labels map[string]string) bool
	// DockerRoot is the daemon's data root, where the probe reads a
	// container's labels (config.v2.json) without an API call that would
	// itself cost the daemon CPU; /var/lib/docker when empty.
	DockerRoot string
}

// Probe samples CPU from Start to Stop.
type Probe struct {
	opts     Options
	stop     chan struct{}
	done     chan Report
	self     int
	owned    map[string]bool // container id -> the caller's
	procs    map[int]*proc
	exited   []*proc
	started  time.Time
	machine0 uint64
}

// proc is one watched process.
type proc struct {
	pid, ppid   int
	start       uint64 // starttime, to tell a reused pid apart
	group       string
	container   string
	comm        string
	first, last times // at first and last sighting
	newborn     bool  // started after the window began: its first counts from zero
	seen        bool  // seen in the latest poll
}

// times are a process's own and reaped children's CPU, in clock ticks.
type times struct{ own, children uint64 }

// Start begins a window.
func Start(opts Options) (*Probe, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.DockerRoot == "" {
		opts.DockerRoot = "/var/lib/docker"
	}
	p := &Probe{opts: opts, stop: make(chan struct{}), done: make(chan Report, 1), self: os.Getpid(),
		owned: map[string]bool{}, procs: map[int]*proc{}}
	ready := make(chan error, 1)
	go p.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return p, nil
}

// Stop ends the window and returns its report.
func (p *Probe) Stop() Report {
	close(p.stop)
	return <-p.done
}

// run polls on a thread of its own, so its CPU can be read and subtracted.
func (p *Probe) run(ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	probe0, err := threadTicks(p.self, tid)
	if err == nil {
		p.machine0, err = machineTicks()
	}
	if err != nil {
		ready <- fmt.Errorf("read /proc (cpuprobe needs Linux procfs): %w", err)
		return
	}
	p.started = time.Now()
	p.poll(true)
	ready <- nil
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.poll(false)
		case <-p.stop:
			p.poll(false)
			wall := time.Since(p.started)
			machine1, _ := machineTicks()
			probe1, _ := threadTicks(p.self, tid)
			r := p.report()
			r.Wall = wall
			r.Machine = time.Duration(machine1-p.machine0) * clockTick
			r.Probe = time.Duration(probe1-probe0) * clockTick
			r.Groups[GroupTest] = max(0, r.Groups[GroupTest]-r.Probe)
			for k := range r.Commands {
				if strings.HasPrefix(k, GroupTest+"/") && !strings.HasPrefix(k, GroupTest+"/(") {
					r.Commands[k] = max(0, r.Commands[k]-r.Probe)
				}
			}
			p.done <- r
			return
		}
	}
}

// poll reads the watched processes and classifies new ones.
func (p *Probe) poll(initial bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, q := range p.procs {
		q.seen = false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		q := p.procs[pid]
		if q != nil && q.group == "" {
			// Known and not watched: skip without reading its stat, which
			// keeps the probe cheap. A pid reused between two polls stays
			// unwatched; over a benchmark's window that is rare.
			q.seen = true
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue
		}
		if q != nil && q.start != st.start {
			p.gone(q)
			q = nil
		}
		if q == nil {
			q = &proc{pid: pid, ppid: st.ppid, start: st.start, first: st.t, newborn: !initial}
			if q.newborn {
				q.first = times{}
			}
			q.group, q.container = p.classify(pid, st)
			p.procs[pid] = q
		}
		q.seen, q.ppid, q.last, q.comm = true, st.ppid, st.t, st.comm
		if q.group == GroupRunc && !strings.HasPrefix(st.comm, "runc") {
			// runc init became the container's process.
			q.group = GroupContainer
		}
	}
	for pid, q := range p.procs {
		if !q.seen {
			p.gone(q)
			delete(p.procs, pid)
		}
	}
}

// gone records a watched process that exited.
func (p *Probe) gone(q *proc) {
	if q.group != "" {
		p.exited = append(p.exited, q)
	}
}

// report sums the window: own CPU of every watched process, plus each
// watched parent's reaped-children delta less what its seen children
// already counted.
func (p *Probe) report() Report {
	r := Report{Groups: map[string]time.Duration{}, Commands: map[string]time.Duration{}}
	all := slices.Collect(maps.Values(p.procs))
	all = append(all, p.exited...)
	counted := map[int]uint64{} // parent pid -> ticks of its exited, seen children
	for _, q := range p.exited {
		counted[q.ppid] += q.last.own + q.last.children
	}
	for _, q := range all {
		if q.group == "" {
			continue
		}
		own := time.Duration(q.last.own-min(q.first.own, q.last.own)) * clockTick
		r.Groups[q.group] += own
		r.Commands[q.group+"/"+q.comm] += own
		reaped := int64(q.last.children) - int64(q.first.children) - int64(counted[q.pid])
		if reaped > 0 {
			r.Groups[childGroup(q.group)] += time.Duration(reaped) * clockTick
			r.Commands[childGroup(q.group)+"/(reaped)"] += time.Duration(reaped) * clockTick
		}
	}
	return r
}

// childGroup is where the unseen children of a process in group g count.
func childGroup(g string) string {
	switch g {
	case GroupShim:
		return GroupRunc
	case GroupTest:
		return GroupTestChild
	case GroupContainerd:
		return GroupShim
	}
	return g
}

// stat is what the probe reads of /proc/<pid>/stat.
type stat struct {
	comm  string
	ppid  int
	start uint64
	t     times
}

// readStat parses /proc/<pid>/stat (comm may hold spaces and parentheses:
// the fields after it start after its last ')').
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	return parseStat(b)
}

// parseStat parses a stat line.
func parseStat(b []byte) (stat, error) {
	l, r := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if l < 0 || r < l {
		return stat{}, fmt.Errorf("malformed stat %q", b)
	}
	f := strings.Fields(string(b[r+1:]))
	// f[0] is field 3 (state): utime is field 14, starttime field 22.
	if len(f) < 20 {
		return stat{}, fmt.Errorf("short stat %q", b)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i-3], 10, 64); return v }
	return stat{comm: string(b[l+1 : r]), ppid: int(n(4)), start: n(22),
		t: times{own: n(14) + n(15), children: n(16) + n(17)}}, nil
}

// threadTicks is one thread's utime+stime.
func threadTicks(pid, tid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, err
	}
	st, err := parseStat(b)
	return st.t.own, err
}

// machineTicks is the machine's non-idle time (/proc/stat's cpu line less
// idle and iowait).
func machineTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("malformed /proc/stat %q", line)
	}
	var busy uint64
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; steal and guest are not ours
			continue
		}
		busy += v
	}
	return busy, nil
}

var containerID = regexp.MustCompile(`[0-9a-f]{64}`)

// classify decides which group a new process belongs to ("" for none).
func (p *Probe) classify(pid int, st stat) (group, container string) {
	if pid == p.self {
		return GroupTest, ""
	}
	if parent := p.procs[st.ppid]; parent != nil && (parent.group == GroupTest || parent.group == GroupTestChild) {
		return GroupTestChild, ""
	}
	switch {
	case st.comm == "dockerd":
		return GroupDockerd, ""
	case st.comm == "containerd":
		return GroupContainerd, ""
	case strings.HasPrefix(st.comm, "containerd-shim"), st.comm == "runc":
		id := containerID.FindString(cmdline(pid))
		if !p.owns(id) {
			return "", ""
		}
		if st.comm == "runc" {
			return GroupRunc, id
		}
		return GroupShim, id
	}
	if parent := p.procs[st.ppid]; parent != nil {
		switch parent.group {
		case GroupContainer, GroupShim:
			return GroupContainer, parent.container
		case GroupRunc: // runc init, before it joins the container's cgroup
			return GroupRunc, parent.container
		}
	}
	if id := cgroupContainer(pid); id != "" && p.owns(id) {
		return GroupContainer, id
	}
	return "", ""
}

// owns says whether container id is the caller's, reading its labels once.
func (p *Probe) owns(id string) bool {
	if id == "" {
		return false
	}
	if p.opts.Owns == nil {
		return true
	}
	if v, ok := p.owned[id]; ok {
		return v
	}
	var cfg struct {
		Config struct{ Labels map[string]string }
	}
	b, err := os.ReadFile(filepath.Join(p.opts.DockerRoot, "containers", id, "config.v2.json"))
	v := err == nil && json.Unmarshal(b, &cfg) == nil && p.opts.Owns(cfg.Config.Labels)
	p.owned[id] = v
	return v
}

// cmdline is a process's command line, NULs as spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

// cgroupContainer is the Docker container id in a process's cgroup path,
// if any (cgroupfs driver: /docker/<id>; systemd: docker-<id>.scope).
func cgroupContainer(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	for l := range strings.SplitSeq(string(b), "\n") {
		if i := strings.Index(l, "docker"); i >= 0 {
			if id := containerID.FindString(l[i:]); id != "" {
				return id
			}
		}
	}
	return ""
}
