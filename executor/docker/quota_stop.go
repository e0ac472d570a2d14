package docker

import (
	"context"
	"sync"

	"golang.org/x/sys/unix"
)

// initProcess pins the container's init process (docker-init, its host
// pid) with a pidfd, so that a watchdog that finds the workspace over
// quota stops the container at once: SIGKILL to a pid namespace's init
// kills every process in it, and a signal through a pidfd never reaches
// another process that reused the pid. Through the daemon (ContainerKill)
// the stop took about 100 ms on an idle 2-core host, time in which a
// writer puts 100 MB into the page cache. It needs the gateway on the
// daemon's host with the right to signal the container (root); elsewhere
// stop goes through the daemon alone.
type initProcess struct {
	mu sync.Mutex // orders kill and close: a closed fd's number may be reused
	fd int        // -1 once closed
}

// openInit opens a pidfd on pid, the host pid of container id's init, or
// returns nil when it cannot (another pid namespace, no rights, gone).
func openInit(pid int, id string) *initProcess {
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	// The pid was the container's when the daemon was asked; the fd now
	// pins a process: check that it is still the container's.
	if hostCgroupFile(pid, id) == "" {
		_ = unix.Close(fd)
		return nil
	}
	return &initProcess{fd: fd}
}

// kill sends SIGKILL to the container's init (and so to all of it).
func (p *initProcess) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil
	}
	return unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
}

// close releases the pidfd; kill does nothing afterwards.
func (p *initProcess) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
		p.fd = -1
	}
}

// freeze pauses the container (the cgroup freezer, through the daemon)
// while the quota watchdog measures its workspace; thaw resumes it. A
// writer frozen between the measurement that suspects the workspace over
// quota and the stop writes nothing in between.
func (s *Sandbox) freeze() (thaw func(), ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.e.o.CallTimeout)
	defer cancel()
	if err := s.e.api.ContainerPause(ctx, s.id); err != nil {
		s.logger.Debug("cannot pause the sandbox to measure its workspace", "error", err)
		return nil, false
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.e.o.CallTimeout)
		defer cancel()
		if err := s.e.api.ContainerUnpause(ctx, s.id); err != nil && !s.stopped.Load() {
			s.logger.Warn("cannot resume the sandbox after measuring its workspace", "error", err)
		}
	}, true
}
