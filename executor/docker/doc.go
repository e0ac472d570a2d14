// Package docker is the Docker backend of executor: it creates one
// disposable container per request over the chat's persistent workspace,
// runs commands in it through the Docker exec API, removes it afterwards,
// and cleans up what crashed gateways left behind (a reconciler for
// containers, a retention sweep for workspaces nobody used for a while).
//
// It is the only package of the module that imports the Docker SDK. Each
// piece of code depends on a small unexported interface listing only the
// Docker calls it makes (containerAPI, execAPI), so tests can fake them.
//
// Every container gets the security baseline of DESIGN.md by default: a
// non-root user, an init process, all capabilities dropped,
// no-new-privileges, a read-only root filesystem with size-capped tmpfs for
// /tmp and HOME, memory == memory+swap, CPU, pids and nofile limits, network
// "none", log driver "none", no host namespaces, no devices and structured
// bind mounts only. Its main process (sleep) ends at the sandbox deadline by
// itself, and AutoRemove makes the daemon delete the container then, even
// when no gateway is alive.
//
// Commands run on one of two paths behind the internal commandRunner
// interface. With the in-container helper (Options.HelperBinary mounted
// read-only, or Options.UseImageHelper) the helper is the main process and
// Exec goes over its socket in the per-sandbox host directory (~1 ms). Without
// it, Exec uses the Docker exec API (tens of ms): every command carries a
// token in its environment, and because Docker cannot kill an exec, the
// token's processes and every process of their sessions are found and
// signalled (SIGTERM, SIGKILL after Options.StopGrace): from the host
// through the container's cgroup and /proc when the gateway runs on the
// daemon's host as root, else by a kill script in a second exec; when even
// that cannot start (a fork bomb at the pids limit) the container is
// killed. OOM kills are read from the container's memory cgroup counter
// (on the host when reachable, else by exec), since State.OOMKilled only
// covers the main process.
//
// Before a container starts on a chat, Create removes any container still
// on that chat's workspace (left by a gateway killed mid-run, or by a
// failed removal) and waits until the daemon no longer lists it, so two
// containers never share a workspace even before the reconciler runs.
// Faults are named: a command whose container went away (docker rm -f, a
// daemon restart, a daemon that stopped answering) fails with
// executor.ErrSandboxGone; a daemon that does not answer when a sandbox
// should start fails Create (and New) with executor.ErrUnavailable.
//
// Host exposure: DataDir is kept 0700 (made so at start when the gateway
// owns it, refused otherwise), host-made workspace directories are 0700 and
// files 0600, and the sandbox runs as executor.DefaultUser (uid 100000), which New
// checks against /etc/passwd and warns about when it is a host account;
// files the agent makes keep its own umask but sit behind DataDir's 0700.
//
// Neutral paths: the kernel shows a bind mount's root in the container's
// /proc/self/mountinfo as the source's path within its filesystem, so no
// host name carries a tenant id. Workspaces are {data}/ws/{name}, name a
// keyed hash of user and chat (executor.WorkspaceLayout; legacy
// workspaces/{user}/chat-{chat} directories and quota/{user}/chat-{chat}.img
// images are renamed on a chat's first Create); host dirs are
// {data}/sandboxes/{random id}; host sockets are bound as
// /proc/self/fd/N/name, the address their accepted ends show in the
// sandbox's /proc/net/unix; /sys/devices/virtual/block is masked, since
// every loop device's backing file path is readable there. Still visible:
// with the watchdog quota, DataDir's path within its filesystem (a DataDir
// that is its own mount shows only /ws/... and /sandboxes/...); with
// QuotaLoop, nothing of DataDir (the workspace is its own filesystem, root
// "/", and New mounts a tmpfs at {data}/sandboxes, unmounted by Close when
// no other instance uses it); a bind-mounted Options.HelperBinary's host
// path (Options.UseImageHelper avoids it); Docker's own paths
// (/var/lib/docker/containers/{id}/hostname and the overlay layers). Under
// runsc (gVisor) the sandbox's mountinfo shows every root as "/".
//
// Each workspace has a disk and inode quota (Spec.DiskBytes, Spec.Inodes).
// By default (QuotaWatchdog) no file of the sandbox grows past the disk
// quota (RLIMIT_FSIZE, and a seccomp filter refusing fallocate past a
// file's size), and a watchdog stops a sandbox over quota
// (executor.ErrNoSpace): it reads the filesystem's usage every 10 ms and
// walks the workspace when that nears a quota (at least every
// Options.QuotaInterval), freezing the sandbox during a long walk, so
// many files pass the quota by what the agent writes in about 10 ms and
// a short walk (TestQuotaBounds and BenchmarkQuotaOvershoot log the
// figures; quota_watchdog.go says the pace).
// With Options.Quota QuotaLoop (root, e2fsprogs, loop devices, dockerd in
// the gateway's mount namespace) the workspace is its own sparse ext4
// image under {data}/quota, loop-mounted at the workspace path by the
// chat's first Create and kept mounted until retention or Close, so the
// kernel answers ENOSPC inside the container; its files are then visible
// at the workspace path only while mounted. New logs the mode in force
// and its bound. Create refuses a sandbox when the data directory's free
// space is under Options.MinFreeBytes.
//
// Concurrency: an Executor is safe for concurrent use. One chat runs one
// request at a time: Create leases the chat in this process and takes an
// flock on {data}/locks/{user}/{chat}.lock so that gateways sharing a data directory
// never share a workspace either. A Sandbox is safe for concurrent use;
// Close may be called from any goroutine and more than once.
package docker
