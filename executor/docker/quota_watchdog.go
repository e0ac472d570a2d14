package docker

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// The watchdog's pace. It measures a running sandbox's workspace (a walk
// that stats every entry, stopping past either quota: about 0.7 s for
// 200,000 files on this project's 2-core machines) and stops the sandbox
// once it is over quota (a pidfd SIGKILL to the container's init,
// quota_stop.go). Between walks one statfs(2) every minQuotaPause (a
// microsecond) reads what the workspace's filesystem has in use, and:
//
//   - when the last walk plus the filesystem's growth since puts the
//     workspace over a quota, it walks at once; when the last walk took
//     freezeAfterWalk or more, the sandbox is frozen (ContainerPause) for
//     that walk, then stopped or resumed: the writer writes nothing while
//     a long walk measures, so what passes the quota is what it writes in
//     one statfs tick and the pause call (about 100 ms: longer than a
//     short walk, which is why short walks do not freeze);
//   - when the filesystem grew by a third of what the workspace had left,
//     it walks without freezing;
//   - else it walks after a pause of idleQuotaPause, or walkPauseFactor
//     times the last walk when longer (a twentieth of a core), shortened
//     to a third of the time the last growth rate needs to reach the
//     quota, and at most Options.QuotaInterval.
//
// Walks are at least minQuotaPause and twice the last walk apart (at most
// a third of a core; below QuotaInterval). The filesystem's counters are
// shared with other writers: their growth can freeze a sandbox for a walk
// it did not need (no more often than that), and another chat deleting
// while this one writes hides the growth, leaving the pause to bound the
// overshoot.
const (
	minQuotaPause   = 10 * time.Millisecond
	idleQuotaPause  = 100 * time.Millisecond
	walkPauseFactor = 20
	freezeAfterWalk = 50 * time.Millisecond
)

// quotaSample is one measurement of a workspace.
type quotaSample struct {
	at            time.Time
	bytes, inodes int64         // the workspace's, at least (MeasureDir)
	walk          time.Duration // how long the measurement took
	fs            fsUsage       // the filesystem's, just before the walk
}

// fsUsage is what a filesystem has in use.
type fsUsage struct{ bytes, inodes int64 }

// statUsage reads dir's filesystem's usage.
func statUsage(dir string) (fsUsage, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fsUsage{}, false
	}
	//nolint:gosec // block and inode counts fit int64
	return fsUsage{bytes: int64(st.Blocks-st.Bfree) * st.Bsize, inodes: int64(st.Files - st.Ffree)}, true
}

// grewTowardQuota reports whether the filesystem grew, from last's walk to
// now, by a third of what the workspace had left of either quota.
func grewTowardQuota(last quotaSample, now fsUsage, disk, inodes int64) bool {
	return 3*(now.bytes-last.fs.bytes) >= disk-last.bytes && now.bytes > last.fs.bytes ||
		3*(now.inodes-last.fs.inodes) >= inodes-last.inodes && now.inodes > last.fs.inodes
}

// nextPause is how long the watchdog waits after cur (prev the measurement
// before it, zero at the first) for a workspace of quota disk and inodes,
// at most maxPause, unless the filesystem grows meanwhile.
func nextPause(prev, cur quotaSample, disk, inodes int64, maxPause time.Duration) time.Duration {
	pause := max(idleQuotaPause, walkPauseFactor*cur.walk)
	if !prev.at.IsZero() && cur.at.After(prev.at) {
		dt := cur.at.Sub(prev.at)
		for _, g := range []struct{ grew, left int64 }{
			{cur.bytes - prev.bytes, disk - cur.bytes},
			{cur.inodes - prev.inodes, inodes - cur.inodes},
		} {
			if g.grew > 0 {
				toQuota := time.Duration(float64(dt) * float64(max(g.left, 0)) / float64(g.grew))
				pause = min(pause, toQuota/3)
			}
		}
	}
	return min(max(pause, walkGap(cur)), max(maxPause, minQuotaPause))
}

// walkGap is the least time between the start of the walk that took cur
// and the next one.
func walkGap(cur quotaSample) time.Duration { return max(minQuotaPause, 2*cur.walk) }

// overByEstimate reports whether last's measurement plus the filesystem's
// growth since puts the workspace over either quota.
func overByEstimate(last quotaSample, now fsUsage, disk, inodes int64) bool {
	return last.bytes+now.bytes-last.fs.bytes > disk || last.inodes+now.inodes-last.fs.inodes > inodes
}

// watchdogQuota measures the workspace of each running sandbox and stops
// the sandbox over its quota; RLIMIT_FSIZE and the fallocate filter
// (kernelLimits) bound each file meanwhile.
type watchdogQuota struct {
	interval time.Duration // the longest pause between measurements
	logger   hclog.Logger
}

func (w *watchdogQuota) mode() QuotaMode { return QuotaWatchdog }

func (w *watchdogQuota) limit(p plan, hc *container.HostConfig) { kernelLimits(p, hc) }

func (w *watchdogQuota) drop(string, string) error { return nil }

func (w *watchdogQuota) beforePrepare(string, string) error { return nil }

// measure walks wsDir once.
func measure(wsDir string, p plan) (quotaSample, error) {
	fs, _ := statUsage(wsDir)
	start := time.Now()
	b, n, err := executor.MeasureDir(wsDir, p.spec.DiskBytes, p.spec.Inodes)
	return quotaSample{at: start, bytes: b, inodes: n, walk: time.Since(start), fs: fs}, err
}

func (w *watchdogQuota) attach(_ context.Context, p plan, wsDir string, ctl sandboxControl) (quotaHandle, error) {
	first, err := measure(wsDir, p)
	if qerr := executor.OverQuota(first.bytes, first.inodes, p.spec.DiskBytes, p.spec.Inodes); qerr != nil {
		return nil, qerr
	}
	if err != nil {
		return nil, err
	}
	h := &watchdogHandle{stop: make(chan struct{})}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		w.watch(h, p, wsDir, first, ctl)
	}()
	return h, nil
}

// watch measures wsDir at the pace above until h stops or the workspace
// is over quota, which it reports to ctl.over.
func (w *watchdogQuota) watch(h *watchdogHandle, p plan, wsDir string, first quotaSample, ctl sandboxControl) {
	tick := time.NewTicker(minQuotaPause)
	defer tick.Stop()
	prev, cur := quotaSample{}, first
	due := cur.at.Add(nextPause(prev, cur, p.spec.DiskBytes, p.spec.Inodes, w.interval))
	for {
		var now time.Time
		select {
		case <-h.stop:
			return
		case now = <-tick.C:
		}
		fs, ok := statUsage(wsDir)
		gapOver := !now.Before(cur.at.Add(min(walkGap(cur), max(w.interval, minQuotaPause))))
		suspect := ok && gapOver && overByEstimate(cur, fs, p.spec.DiskBytes, p.spec.Inodes)
		if !suspect && now.Before(due) && (!ok || !gapOver || !grewTowardQuota(cur, fs, p.spec.DiskBytes, p.spec.Inodes)) {
			continue
		}
		thaw := func() {}
		if suspect && cur.walk >= freezeAfterWalk {
			if t, frozen := ctl.freeze(); frozen {
				thaw = t
			}
		}
		s, err := measure(wsDir, p)
		if qerr := executor.OverQuota(s.bytes, s.inodes, p.spec.DiskBytes, p.spec.Inodes); qerr != nil {
			h.mu.Lock()
			h.quotaErr = qerr
			h.mu.Unlock()
			w.logger.Warn("workspace over quota; stopping the sandbox", "dir", wsDir, "error", qerr)
			ctl.over(qerr)
			thaw() // the SIGKILL is delivered as the processes thaw
			return
		}
		thaw()
		if err != nil {
			w.logger.Warn("cannot measure the workspace", "dir", wsDir, "error", err)
		} else {
			prev, cur = cur, s
		}
		w.logger.Trace("workspace measured", "bytes", s.bytes, "inodes", s.inodes, "walk", s.walk, "suspect", suspect)
		due = time.Now().Add(nextPause(prev, cur, p.spec.DiskBytes, p.spec.Inodes, w.interval))
	}
}

type watchdogHandle struct {
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	quotaErr error
}

func (h *watchdogHandle) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.quotaErr
}

func (h *watchdogHandle) release() error {
	h.once.Do(func() { close(h.stop) })
	h.wg.Wait()
	return nil
}
