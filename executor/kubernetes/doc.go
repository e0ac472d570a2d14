// Package kubernetes is the Kubernetes backend of executor: each sandbox is
// a pod in one namespace, created per request and deleted afterwards, with
// the in-image helper as its main process and the container baseline of
// DESIGN.md expressed as pod security context (non-root uid and gid,
// runAsNonRoot, every capability dropped, no privilege escalation, a
// read-only root filesystem with size-capped memory-backed emptyDirs for
// /tmp, HOME and the helper's directory, seccomp RuntimeDefault, cpu and
// memory limits, no service account token, no service links, and
// Options.RuntimeClassName, e.g. "nonet" or "gvisor", where the cluster
// offers one). Process limits come from the kubelet's podPidsLimit: the
// executor declares it cannot limit them per sandbox (Capabilities), and a
// Spec's PidsLimit other than the default is refused. A Spec's defaults
// and bounds are executor.Normalize's, as on every backend.
//
// The helper also serves exec and the workspace file API on a loopback port
// of the pod (HelperPort), which the gateway reaches through the API
// server's portforward subresource (client-go, WebSocket with a SPDY
// fallback; one multiplexed connection per sandbox), so the gateway needs
// no network path to the pod and the pod needs no network at all. Exec,
// ReadFile, WriteFile, ListDir, Stat, EditFile and RestoreFile go through
// it: the helper applies executor.Workspace's rules inside the pod (no
// symbolic link followed, FIFOs and devices refused, sizes capped), and the
// host bounds what it reads back. The port gives the pod's own processes
// nothing they lack: they run as the helper's user. The API server's exec
// subresource remains as a path that needs no helper (execAPI).
//
// Model, egress and MCP traffic from the pod comes back the same way, in
// reverse: the helper runs with --reverse, and Sandbox.ListenHost (an
// executor.HostListener; helper.ListenSandbox picks it) keeps connections
// parked in the helper through the port forward, each handed to the
// gateway's listener when a process in the pod connects to the relay (the
// model port, ModelBaseURL; the helper's own mcp.sock). Sandbox.DialPort
// reaches any other loopback port inside the pod.
//
// Workspaces: with Options.StorageClass set, each chat has a
// PersistentVolumeClaim (ReadWriteOnce, Spec.DiskBytes) that Create makes
// on first use and keeps; without it the workspace is an emptyDir that
// ends with the pod, for tests and throwaway chats. A claim unused for
// Options.Retention (a week) is deleted by the sweep (SweepClaims), never
// while its chat is leased or has a pod. Since a claim's size
// is only a request to many provisioners (hostPath, local-path), the
// pod's helper measures the workspace every Options.QuotaInterval against
// Spec.DiskBytes and Spec.Inodes, and a pod over either is stopped: its
// commands fail with executor.ErrNoSpace.
//
// Checkpoints (executor.Checkpointer, with Options.StorageClass): each chat
// has a second claim for its checkpoint Store that no sandbox pod mounts;
// takes, restores and forks run in checkpoint pods of their own
// (checkpoints.go), and retention removes that claim with the workspace's.
//
// The pool (Options.Pool; pool.go): started pods, each over a claim of its
// own that the scheduler bound when it placed the pod, kept for the first
// request of new chats, which adopt one (its labels patched to the chat's)
// instead of waiting seconds for a pod to start; so a chat's workspace
// claim is found by its label, not its name.
//
// Successors (Options.Successors; successor.go): when a chat's sandbox
// closes under the request policy, a new pod of the same configuration
// starts over the chat's claim once the closed one is gone, and the
// chat's next request adopts it instead of waiting for the kubelet to
// start a pod (about 600 ms, most of it its volume loops).
//
// It is the only package of the module that imports client-go.
//
// Replicas: gateways that share a namespace coordinate through Lease
// objects (lease.go): a chat's Lease names the replica serving it, renewed
// every LeaseDuration/3; another replica waits (LeaseWait, then ErrBusy)
// or, once the holder stopped renewing for LeaseDuration+ClockSkew, takes
// the chat over, removing the dead replica's pod on it first. Each
// executor's instance Lease marks it alive; its reconciler (every
// ReconcileInterval) removes the pods and leases of instances whose lease
// expired. Replicas need distinct InstanceIDs ("" picks a random one) and
// clocks within ClockSkew.
//
// The gateway's account needs, in its namespace only: pods (create, get,
// list, watch, patch: adopting a pooled or successor pod, delete), pods/portforward (create, get), pods/exec (create,
// get; the API-server exec path), persistentvolumeclaims (create, get,
// list, patch and delete: last use, retention, the checkpoints' list) and
// leases in coordination.k8s.io (create, get, list, update, delete).
//
// The gateway's MCP tools work the same way: Sandbox.WriteToken gives the
// helper the request's token, and the helper's own mcp.sock is relayed
// back. The agentbox package selects this backend with Options.Executor
// "kubernetes" (examples/gateway -executor kubernetes); the account's RBAC
// is examples/kubernetes/rbac.yaml.
//
// Egress (assistants with sandbox.egress) travels the same way: a Spec
// with Egress gets the helper's relay on Options.EgressPort as the pod's
// HTTP(S)_PROXY (Sandbox.EgressProxyURL), and the gateway's egress proxy
// (executor/egress, which applies the assistant's policy) accepts on
// ListenHost(helper.EgressSocket). The pod itself still has no network.
//
// Concurrency: an Executor is safe for concurrent use; one chat runs one
// request at a time across the replicas (Create waits Spec.LeaseWait, then
// fails with executor.ErrBusy). Before a pod starts on a chat, Create
// deletes any pod still labelled with that chat and waits until it is gone.
// A Sandbox is safe for concurrent use; Close may be called from any
// goroutine and more than once.
package kubernetes
