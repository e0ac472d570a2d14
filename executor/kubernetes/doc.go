// Package kubernetes is the Kubernetes backend of executor: each sandbox is
// a pod in one namespace, created per request and deleted afterwards, with
// the in-image helper as its main process and the container baseline of
// DESIGN.md expressed as pod security context (non-root uid and gid,
// runAsNonRoot, every capability dropped, no privilege escalation, a
// read-only root filesystem with size-capped memory-backed emptyDirs for
// /tmp, HOME and the helper's directory, seccomp RuntimeDefault, cpu and
// memory limits, no service account token, no service links, and
// Options.RuntimeClassName, e.g. "nonet" or "gvisor", where the cluster
// offers one). Process limits come from the kubelet's podPidsLimit.
//
// Commands run through the API server's exec subresource (client-go's
// remotecommand, WebSocket with a SPDY fallback), so the gateway needs no
// network path to the pod and the pod needs no network at all. Each command
// is wrapped in /bin/sh for its working directory and environment and
// carries an exec token; when a command passes its timeout or output cap,
// or its context ends, the stream is closed (the runtime kills the process)
// and a second exec kills every process that still has the token.
//
// Sandbox.DialPort reaches a loopback port inside the pod through the
// portforward subresource (one multiplexed connection per sandbox, one
// stream pair per DialPort), the base for reaching the helper and relaying
// model traffic without a pod network.
//
// Workspaces: with Options.StorageClass set, each chat has a
// PersistentVolumeClaim (ReadWriteOnce, Spec.DiskBytes) that Create makes
// on first use and keeps; without it the workspace is an emptyDir that
// ends with the pod, for tests and throwaway chats.
//
// It is the only package of the module that imports client-go.
//
// Not yet: Exec and the workspace file API (FS methods) through the helper
// in the pod, the model and MCP relays, leases across gateway replicas
// (Lease objects), a reconciler for pods of dead gateways. FS methods fail
// with errors.ErrUnsupported.
//
// Concurrency: an Executor is safe for concurrent use; one chat runs one
// request at a time within this process (Create waits Spec.LeaseWait, then
// fails with executor.ErrBusy). Before a pod starts on a chat, Create
// deletes any pod still labelled with that chat and waits until it is gone.
// A Sandbox is safe for concurrent use; Close may be called from any
// goroutine and more than once.
package kubernetes
