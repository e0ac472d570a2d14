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
// that lstats every entry, stopping past either quota) and stops the
// sandbox once it is over quota, so what a writer puts past the quota is
// what it writes between the measurement that finds the workspace under
// and the one that finds it over, plus one walk and the stop (a pidfd
// SIGKILL to the container's init, quotaStop). A walk costs about a
// microsecond per entry on an idle host and ten times that on a busy
// one, so the watchdog cannot walk often; it walks:
//
//   - when the filesystem under the workspace grew, since the last walk,
//     by a third of what the workspace has left of either quota: one
//     statfs(2) every minQuotaPause (about a microsecond) sees a writer
//     between walks, for it is not charged per directory;
//   - else after a pause of idleQuotaPause, or walkPauseFactor times the
//     last walk when longer (a twentieth of a core at most), shortened to
//     a third of the time the last growth rate needs to reach the quota;
//   - never less than minQuotaPause or twice the last walk apart, never
//     more than Options.QuotaInterval.
//
// The filesystem's counters are shared with other writers: another chat
// deleting while this one writes hides the growth, and then the pause
// alone bounds the overshoot.
const (
	minQuotaPause   = 10 * time.Millisecond
	idleQuotaPause  = 100 * time.Millisecond
	walkPauseFactor = 20
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
	return max(min(pause, maxPause), minQuotaPause, 2*cur.walk)
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
	b, n, err := executor.MeasureDir(wsDir, p.disk, p.inodes)
	return quotaSample{at: start, bytes: b, inodes: n, walk: time.Since(start), fs: fs}, err
}

func (w *watchdogQuota) attach(_ context.Context, p plan, wsDir string, over func(error)) (quotaHandle, error) {
	first, err := measure(wsDir, p)
	if qerr := executor.OverQuota(first.bytes, first.inodes, p.disk, p.inodes); qerr != nil {
		return nil, qerr
	}
	if err != nil {
		return nil, err
	}
	h := &watchdogHandle{stop: make(chan struct{})}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		w.watch(h, p, wsDir, first, over)
	}()
	return h, nil
}

// watch measures wsDir at the pace above until h stops or the workspace
// is over quota, which it reports to over.
func (w *watchdogQuota) watch(h *watchdogHandle, p plan, wsDir string, first quotaSample, over func(error)) {
	tick := time.NewTicker(minQuotaPause)
	defer tick.Stop()
	prev, cur := quotaSample{}, first
	due := cur.at.Add(nextPause(prev, cur, p.disk, p.inodes, w.interval))
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			if now.Before(due) {
				fs, ok := statUsage(wsDir)
				if !ok || !grewTowardQuota(cur, fs, p.disk, p.inodes) || now.Before(cur.at.Add(max(minQuotaPause, 2*cur.walk))) {
					continue
				}
			}
		}
		s, err := measure(wsDir, p)
		if qerr := executor.OverQuota(s.bytes, s.inodes, p.disk, p.inodes); qerr != nil {
			h.mu.Lock()
			h.quotaErr = qerr
			h.mu.Unlock()
			w.logger.Warn("workspace over quota; stopping the sandbox", "dir", wsDir, "error", qerr)
			over(qerr)
			return
		}
		if err != nil {
			w.logger.Warn("cannot measure the workspace", "dir", wsDir, "error", err)
		} else {
			prev, cur = cur, s
		}
		due = time.Now().Add(nextPause(prev, cur, p.disk, p.inodes, w.interval))
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
