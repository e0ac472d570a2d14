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
// Concurrency: an Executor is safe for concurrent use. One chat runs one
// request at a time: Create leases the chat in this process and takes an
// flock next to the workspace so that gateways sharing a data directory
// never share a workspace either. A Sandbox is safe for concurrent use;
// Close may be called from any goroutine and more than once.
package docker
