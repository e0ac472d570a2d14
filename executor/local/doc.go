// Package local is the executor backend for hosts without a container
// runtime ("local mode"): each sandbox is a bubblewrap (bwrap) process tree
// instead of a Docker container, with the same workspace layout, helper,
// model relay, MCP socket and Exec semantics as executor/docker, so the
// middleware and the runners cannot tell the two apart.
//
// A sandbox gets new user, mount, pid, ipc, uts, cgroup and network
// namespaces (the network has only loopback, where the helper relays the
// model port to {HostDir}/model.sock), no nested user namespaces, a new
// session, and runs as the sandbox uid (DefaultUID, 100000) mapped to the
// same unprivileged host uid: bwrap is started as that uid when the gateway
// is root, so nothing in the sandbox is ever host root. The filesystem is
// the host's /usr, /etc and the /bin, /lib links read-only, fresh /proc and
// /dev, size-capped tmpfs for /tmp and HOME, the chat's workspace at
// executor.ContainerWorkdir, the host dir at ContainerHostDir and the helper
// at ContainerHelperPath (also as abx). These three are opened by the
// gateway and mounted by descriptor, so the sandbox user needs no access to
// the data directory, which stays 0700; no other workspace, no /root, /home
// or /run of the host is visible.
//
// The helper is the sandbox's first process under bwrap's init. bwrap is
// held on its block descriptor until its init is in the sandbox's cgroups
// and has the rlimits, so every process of the sandbox is born inside them.
// Limits: RLIMIT_NOFILE, RLIMIT_CORE 0 and RLIMIT_FSIZE (Spec.DiskBytes as a
// per-file cap; the workspace's total is not enforced) always; memory (no
// swap), CPU quota and pids through a cgroup per sandbox when the cgroup
// filesystem is writable (v1 memory/cpu/pids controllers, or a v2 parent
// with them delegated), else RLIMIT_NPROC, which counts every process of
// the sandbox uid on the host. New logs which apply. The whole tree dies
// with the pid namespace's init: at Close, at the deadline (the helper's
// own dead-man switch, and a host timer behind it), and when the gateway
// dies (bwrap's --die-with-parent and a parent-death signal).
//
// What local mode does not isolate compared with a container: the kernel
// is shared as in any container, but there is no seccomp filter (Docker's
// default profile is not applied), the host's /usr and /etc are visible
// (installed programs, /etc/passwd), Spec.Image is ignored (the host's
// tools are the agent's tools), the disk quota is per file only, and
// without a writable cgroup memory and CPU are not limited at all.
// Spec.Network other than "none" and Spec.Runtime are refused.
//
// New runs a fail-fast health check (Check): bwrap installed, user
// namespaces allowed for the sandbox uid (a probe sandbox is started), the
// helper a static executable, the agent CLIs on PATH. Its *HealthError
// names each missing piece and what to do.
//
// Concurrency: an Executor is safe for concurrent use; one chat runs one
// request at a time (a lease in this process and the flock
// {data}/locks/{user}/{chat}.lock, shared with executor/docker). A Sandbox
// is safe for concurrent use; Close may be called from any goroutine and
// more than once.
package local
