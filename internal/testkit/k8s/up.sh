#!/usr/bin/env bash
# up.sh brings up a single-node Kubernetes cluster offline, everything bound to
# 127.0.0.1: etcd, kube-apiserver, a containerd instance of its own (never
# Docker's), the kubelet (in a private mount namespace so host sysctls stay as
# they are), kube-scheduler and kube-controller-manager. It imports the sandbox
# image from the local Docker daemon and writes $K8S_DIR/admin.kubeconfig.
# It records the host's mounts, iptables, links and sysctls first; down.sh
# compares against them. Run as root. Settings: internal/testkit/k8s/env.sh.
#
# Timings of each step are printed and appended to $K8S_DIR/timings.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
[[ $(id -u) == 0 ]] || k8s_die "run as root (the kubelet and containerd need it)"
if [[ -e $K8S_DIR/pids ]]; then
	k8s_die "$K8S_DIR holds a cluster (or its remains); run internal/testkit/k8s/down.sh first"
fi
# K8S_UP_ONLY=runtime starts only the cluster's containerd and imports the
# images (a smoke test of the runtime half and of down.sh without the kube
# binaries); anything else brings up the whole cluster.
only=${K8S_UP_ONLY:-}
if [[ $only == runtime ]]; then
	mkdir -p "$K8S_BIN/cni" && install -m 0755 "$here/cni-none" "$K8S_BIN/cni/agentbox-none"
	[[ -f $K8S_CACHE/pause.tar ]] || "$here/mkpause.sh" "$K8S_CACHE/pause.tar" "$K8S_PAUSE_IMAGE"
else
	"$here/build.sh"
fi

D=$K8S_DIR
mkdir -p "$D"/{pids,logs,pki,baseline,etcd,kubelet,containerd,cni/net.d,cni/net.d-none,run}
chmod 0700 "$D"
start=$(date +%s.%N)
lap=$start
timing() {
	local now
	now=$(date +%s.%N)
	printf '%-28s %6.2f s (total %6.2f s)\n' "$1" "$(echo "$now - $lap" | bc)" "$(echo "$now - $start" | bc)" | tee -a "$D/timings" >&2
	lap=$now
}

# --- baseline of the host -------------------------------------------------
"$here/hoststate.sh" >"$D/baseline/state"
timing baseline

# --- PKI -------------------------------------------------------------------
P=$D/pki
node=$(hostname)
if ! getent ahostsv4 "$node" | grep -q '^127\.'; then
	k8s_die "hostname $node does not resolve to 127.x; add it to /etc/hosts (the API server reaches the kubelet by hostname)"
fi
ossl() { openssl "$@" 2>/dev/null; }
ossl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=agentbox-k8s-ca -keyout "$P/ca.key" -out "$P/ca.crt"
ossl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=agentbox-front-proxy-ca -keyout "$P/fp-ca.key" -out "$P/fp-ca.crt"
# cert NAME SUBJ [SANS] [CA]
cert() {
	local name=$1 subj=$2 sans=${3:-} ca=${4:-ca}
	ossl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$P/$name.key" -out "$P/$name.csr"
	local ext=$P/$name.ext
	echo "basicConstraints=CA:FALSE" >"$ext"
	echo "keyUsage=digitalSignature,keyEncipherment" >>"$ext"
	if [[ -n $sans ]]; then
		echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
		echo "subjectAltName=$sans" >>"$ext"
	else
		echo "extendedKeyUsage=clientAuth" >>"$ext"
	fi
	ossl x509 -req -in "$P/$name.csr" -CA "$P/$ca.crt" -CAkey "$P/$ca.key" -CAcreateserial -days 30 -extfile "$ext" -out "$P/$name.crt"
}
cert apiserver /CN=kube-apiserver "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kubelet-server "/CN=$node" "DNS:$node,DNS:localhost,IP:127.0.0.1"
cert kubelet "/O=system:nodes/CN=system:node:$node"
cert scheduler /CN=system:kube-scheduler
cert controller-manager /CN=system:kube-controller-manager
cert front-proxy-client /CN=front-proxy-client "" fp-ca
ossl genrsa -out "$P/sa.key" 2048
ossl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub"
admin_token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s,agentbox-admin,agentbox-admin,"system:masters"\n' "$admin_token" >"$P/tokens.csv"
server=https://127.0.0.1:$K8S_APISERVER_PORT
kubeconfig() { # FILE USER [token TOKEN | cert NAME]
	local f=$1 user=$2 kind=$3 v=$4 cred
	if [[ $kind == token ]]; then
		cred="    token: $v"
	else
		cred="    client-certificate: $P/$v.crt
    client-key: $P/$v.key"
	fi
	cat >"$f" <<KC
apiVersion: v1
kind: Config
clusters:
- name: agentbox
  cluster:
    server: $server
    certificate-authority: $P/ca.crt
users:
- name: $user
  user:
$cred
contexts:
- name: agentbox
  context: {cluster: agentbox, user: $user}
current-context: agentbox
KC
	chmod 0600 "$f"
}
kubeconfig "$D/admin.kubeconfig" agentbox-admin token "$admin_token"
kubeconfig "$D/kubelet.kubeconfig" "system:node:$node" cert kubelet
kubeconfig "$D/scheduler.kubeconfig" system:kube-scheduler cert scheduler
kubeconfig "$D/controller-manager.kubeconfig" system:kube-controller-manager cert controller-manager
timing pki

# --- processes ---------------------------------------------------------------
B=$K8S_BIN
run() { # NAME CMD... : start a component in its own session, log to logs/NAME.log
	local name=$1
	shift
	setsid "$@" </dev/null >"$D/logs/$name.log" 2>&1 &
	echo $! >"$D/pids/$name"
}
waitfor() { # WHAT TIMEOUT_S CMD...
	local what=$1 t=$2
	shift 2
	local until=$(($(date +%s) + t))
	until "$@" >/dev/null 2>&1; do
		if (($(date +%s) > until)); then
			k8s_die "$what not ready after ${t}s; see $D/logs/"
		fi
		sleep 0.1
	done
}
alive() { kill -0 "$(cat "$D/pids/$1")" 2>/dev/null; }

if [[ $only != runtime ]]; then
run etcd "$B/etcd" --name agentbox --data-dir "$D/etcd" \
	--listen-client-urls "http://127.0.0.1:$K8S_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$K8S_ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$K8S_ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$K8S_ETCD_PEER_PORT" \
	--initial-cluster "agentbox=http://127.0.0.1:$K8S_ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
waitfor etcd 30 curl -fsS "http://127.0.0.1:$K8S_ETCD_PORT/health"
timing etcd

run kube-apiserver "$B/kube-apiserver" --bind-address 127.0.0.1 --secure-port "$K8S_APISERVER_PORT" \
	--etcd-servers "http://127.0.0.1:$K8S_ETCD_PORT" --service-cluster-ip-range 10.96.0.0/16 \
	--endpoint-reconciler-type none \
	--client-ca-file "$P/ca.crt" --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
	--token-auth-file "$P/tokens.csv" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--kubelet-client-certificate "$P/apiserver-kubelet-client.crt" --kubelet-client-key "$P/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority "$P/ca.crt" --kubelet-preferred-address-types Hostname \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$P/sa.pub" \
	--service-account-signing-key-file "$P/sa.key" \
	--requestheader-client-ca-file "$P/fp-ca.crt" --requestheader-allowed-names front-proxy-client \
	--requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
	--requestheader-extra-headers-prefix X-Remote-Extra- \
	--proxy-client-cert-file "$P/front-proxy-client.crt" --proxy-client-key-file "$P/front-proxy-client.key" \
	--profiling=false --v 1
waitfor kube-apiserver 120 curl -fsS --cacert "$P/ca.crt" -H "Authorization: Bearer $admin_token" "$server/readyz"
timing kube-apiserver
fi

# containerd: own config, socket, root, state, plugin dir and runc root.
C=$D/containerd
cat >"$C/config.toml" <<TOML
version = 2
root = "$C/root"
state = "$C/state"
oom_score = 0
[grpc]
  address = "$D/run/containerd.sock"
[ttrpc]
  address = "$D/run/containerd.sock.ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$C/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$K8S_PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$D/run/runc"
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nonet]
      runtime_type = "io.containerd.runc.v2"
      cni_conf_dir = "$D/cni/net.d-none"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nonet.options]
        BinaryName = "$(command -v runc)"
        Root = "$D/run/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$B/cni"
    conf_dir = "$D/cni/net.d"
    max_conf_num = 1
TOML
# Both the default and the nonet handler use the no-network plugin; the nonet
# handler stays pinned to it should the default network change.
for dir in net.d net.d-none; do
	cat >"$D/cni/$dir/10-agentbox-none.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "agentbox-none", "plugins": [{"type": "agentbox-none"}]}
JSON
done
run containerd containerd --config "$C/config.toml"
waitfor containerd 30 ctr --address "$D/run/containerd.sock" version
timing containerd

ctrk() { ctr --address "$D/run/containerd.sock" -n k8s.io "$@"; }
ctrk images import "$K8S_CACHE/pause.tar" >/dev/null
for img in $K8S_IMAGES; do
	docker image inspect "$img" >/dev/null 2>&1 || k8s_die "image $img is not in the local Docker daemon; build it with make image and make image-codex"
	docker save "$img" | ctrk images import - >/dev/null
done
timing "image import"
if [[ $only == runtime ]]; then
	k8s_log "containerd up with images imported (K8S_UP_ONLY=runtime); socket $D/run/containerd.sock"
	exit 0
fi

# kubelet: root dir bound onto itself rshared, so the tmpfs volumes it mounts in
# its private mount namespace reach containerd; host sysctls it would rewrite
# are bind-masked there with files already holding the values it wants.
K=$D/kubelet
mount --bind "$K" "$K"
mount --make-rshared "$K"
echo "$K" >"$D/mounted"
mkdir -p "$D/sysctl"
mask=""
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
	k=${kv%=*} v=${kv#*=}
	if [[ $(cat "/proc/sys/$k") != "$v" ]]; then
		f=$D/sysctl/${k//\//.}
		echo "$v" >"$f"
		mask+="mount --bind $f /proc/sys/$k && "
	fi
done
cat >"$D/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $K8S_KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $K8S_KUBELET_HEALTHZ_PORT
readOnlyPort: 0
tlsCertFile: $P/kubelet-server.crt
tlsPrivateKeyFile: $P/kubelet-server.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$D/run/containerd.sock
oomScoreAdj: 0
maxOpenFiles: $(ulimit -Hn)
protectKernelDefaults: true
makeIPTablesUtilChains: false
failSwapOn: false
podPidsLimit: ${K8S_POD_PIDS_LIMIT:-1024}
maxPods: 50
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
syncFrequency: 10s
fileCheckFrequency: 10s
YAML
run kubelet unshare --mount --propagation unchanged sh -c "${mask}exec $B/kubelet --config $D/kubelet.yaml --kubeconfig $D/kubelet.kubeconfig --root-dir $K --cert-dir $P --v 1"
kc() { "$B/kubectl" --kubeconfig "$D/admin.kubeconfig" "$@"; }
ready() { [[ $(kc get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
waitfor "kubelet (node $node Ready)" 120 ready
timing "kubelet, node Ready"

run kube-scheduler "$B/kube-scheduler" --kubeconfig "$D/scheduler.kubeconfig" --authentication-kubeconfig "$D/scheduler.kubeconfig" \
	--authorization-kubeconfig "$D/scheduler.kubeconfig" --bind-address 127.0.0.1 --secure-port "$K8S_SCHED_PORT" --leader-elect=false
run kube-controller-manager "$B/kube-controller-manager" --kubeconfig "$D/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$D/controller-manager.kubeconfig" --authorization-kubeconfig "$D/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$K8S_CM_PORT" --leader-elect=false --use-service-account-credentials \
	--service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
	--cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
	--requestheader-client-ca-file "$P/fp-ca.crt"
kc apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nonet}
handler: nonet
YAML
# The namespace the example gateway and the claude e2e tests use by default
# (executor/kubernetes DefaultNamespace).
kc create namespace agentbox >/dev/null
# Workspace volumes: the cluster has no dynamic provisioner, so a pool of
# hostPath PersistentVolumes of the class agentbox-local (bound at first use,
# retained) stands in for one, each directory owned by the sandbox user.
# Released volumes are not reused; the pool serves one cluster's tests: a
# chat with checkpoints binds two (its workspace and checkpoint claims). With
# 128, the replicas test's last two chats, run after every other suite,
# once waited for a pod until ReadyTimeout, most likely for want of a volume.
mkdir -p "$D/pv"
{
	cat <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: agentbox-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
YAML
	for i in $(seq -w 1 "${K8S_PVS:-512}"); do
		install -d -m 0700 -o "${K8S_PV_UID:-100000}" -g "${K8S_PV_UID:-100000}" "$D/pv/$i"
		cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: agentbox-local-$i}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: agentbox-local
  hostPath: {path: $D/pv/$i, type: Directory}
YAML
	done
} | kc apply -f - >/dev/null
sa() { kc -n default get serviceaccount default; }
waitfor "controller-manager (default ServiceAccount)" 120 sa
for c in etcd kube-apiserver containerd kubelet kube-scheduler kube-controller-manager; do
	alive "$c" || k8s_die "$c exited; see $D/logs/$c.log"
done
timing "scheduler, controller-manager"
k8s_log "cluster up; export AGENTBOX_KUBECONFIG=$D/admin.kubeconfig (kubectl: $B/kubectl)"
