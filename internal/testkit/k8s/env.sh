# Shared settings for the offline single-node cluster scripts (sourced, not run).
# Every value can be overridden from the environment.

# Kubernetes and etcd versions the build pins. Kubernetes 1.34 is the last line that
# still runs on Debian 12's containerd 1.6.
K8S_VERSION=${K8S_VERSION:-v1.34.2}
K8S_STAGING_VERSION=${K8S_STAGING_VERSION:-v0.34.2}
ETCD_VERSION=${ETCD_VERSION:-v3.5.21}

# Cache of built binaries, Go build cache and extracted Debian packages. Lives outside
# any worktree so later runs (and CI on the same machine) relink warm.
K8S_CACHE=${AGENTBOX_K8S_CACHE:-${K8S_CACHE:-/var/cache/agentbox-k8s}}
# State of one running cluster: PKI, etcd data, containerd root, kubelet dir, logs.
K8S_DIR=${AGENTBOX_K8S_DIR:-${K8S_DIR:-/var/lib/agentbox-k8s}}

K8S_BIN=$K8S_CACHE/bin
K8S_APISERVER_PORT=${K8S_APISERVER_PORT:-16443}
K8S_ETCD_PORT=${K8S_ETCD_PORT:-12379}
K8S_ETCD_PEER_PORT=${K8S_ETCD_PEER_PORT:-12380}
K8S_KUBELET_PORT=${K8S_KUBELET_PORT:-20250}
K8S_KUBELET_HEALTHZ_PORT=${K8S_KUBELET_HEALTHZ_PORT:-20248}
K8S_SCHED_PORT=${K8S_SCHED_PORT:-20259}
K8S_CM_PORT=${K8S_CM_PORT:-20257}
# Images imported into the cluster's containerd from the local Docker daemon.
K8S_IMAGES=${K8S_IMAGES:-agentbox/sandbox-claude:latest agentbox/sandbox-codex:latest}
K8S_PAUSE_IMAGE=registry.k8s.io/pause:3.10

k8s_log() { printf '%s k8s: %s\n' "$(date +%T.%3N)" "$*" >&2; }
k8s_die() { k8s_log "error: $*"; exit 1; }
