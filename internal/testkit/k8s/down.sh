#!/usr/bin/env bash
# down.sh tears the cluster of up.sh down and restores the host: it removes
# the pods' containers through the cluster's own containerd, stops the
# components in reverse order (TERM, then KILL), unmounts everything under
# $K8S_DIR, removes the kubepods cgroups and the host paths the kubelet and
# CRI made, compares the host with up.sh's baseline and removes $K8S_DIR.
# Idempotent; copes with crashed components. Exit status 1 when the host
# differs from the baseline in something this cluster could have changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
D=$K8S_DIR
[[ -d $D ]] || {
	k8s_log "nothing to tear down at $D"
	exit 0
}
t0=$(date +%s.%N)
sock=$D/run/containerd.sock
stop() { # NAME [GRACE_S]
	local f=$D/pids/$1 pid
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -TERM "$pid" 2>/dev/null; then
		for _ in $(seq 1 $((${2:-10} * 10))); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null && k8s_log "$1 ignored SIGTERM; killed"
		# Reap is not ours (setsid child of up.sh); wait until it is gone.
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
	rm -f "$f"
}

# The controllers would recreate what we delete; the kubelet would restart it.
stop kube-controller-manager
stop kube-scheduler
stop kubelet
# Every pod container and sandbox, through our containerd only.
if [[ -S $sock ]] && ctr --address "$sock" version >/dev/null 2>&1; then
	ctrk() { timeout 30 ctr --address "$sock" -n k8s.io "$@"; }
	for t in $(ctrk tasks ls -q 2>/dev/null); do
		ctrk tasks kill -s SIGKILL "$t" >/dev/null 2>&1
	done
	for t in $(ctrk tasks ls -q 2>/dev/null); do
		for _ in $(seq 1 30); do
			ctrk tasks delete "$t" >/dev/null 2>&1 && break
			sleep 0.1
		done
	done
	for c in $(ctrk containers ls -q 2>/dev/null); do
		ctrk containers delete "$c" >/dev/null 2>&1
	done
fi
stop containerd
# Shims of our containerd (their command line names our socket) outlive it
# when a task could not be deleted.
for p in $(pgrep -f -- "-address $sock" 2>/dev/null); do
	k8s_log "killing leftover shim $p"
	kill -KILL "$p" 2>/dev/null
done
stop kube-apiserver
stop etcd

# Mounts under $D (and pod netns the CRI made), deepest first.
for _ in 1 2 3; do
	left=$(awk -v d="$D/" '$5 ~ "^"d || $5 == substr(d, 1, length(d)-1) {print $5}' /proc/self/mountinfo | sort -r)
	[[ -z $left ]] && break
	for m in $left; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
base=$D/baseline/state
had() { [[ -f $base ]] && grep -qxF "$1" "$base"; }
for ns in /run/netns/cni-* /var/run/netns/cni-*; do
	[[ -e $ns ]] || continue
	umount "$ns" 2>/dev/null
	rm -f "$ns"
done
# /var/lib/kubelet: the kubelet's device manager puts its socket in
# /var/lib/kubelet/device-plugins whatever --root-dir says.
for p in /run/netns /var/lib/cni /var/log/pods /var/log/containers /var/lib/kubelet; do
	[[ -e $p ]] && ! had "$p" && rm -rf "$p"
done
# kubepods cgroups (cgroupfs driver), leaves first.
for cg in /sys/fs/cgroup/*/kubepods*; do
	[[ -d $cg ]] || continue
	had "$cg" && continue
	find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
done

status=0
if [[ -f $base ]]; then
	now=$("$here/hoststate.sh")
	# Docker's own containers (other users of this machine) come and go:
	# ignore their veths, mounts and rules.
	noise='veth|docker|/var/lib/docker|/run/docker|DOCKER|br-[0-9a-f]'
	d=$(diff <(grep -Ev "$noise" "$base") <(grep -Ev "$noise" <<<"$now"))
	if [[ -n $d ]]; then
		k8s_log "the host differs from the baseline taken by up.sh:"
		echo "$d" >&2
		if grep -Eq "$D|kubepods|cni|netns|KUBE-|CNI-|kubelet|^[<>] (vm|kernel|net)/|^[<>] /(var|run|etc)/" <<<"$d"; then
			status=1
		else
			k8s_log "(none of it is the cluster's: no path, rule or sysctl it touches)"
		fi
	else
		k8s_log "host matches the baseline (mounts, iptables, links, sysctls, paths)"
	fi
fi
if pgrep -f -- "$D/" >/dev/null; then
	k8s_log "processes still name $D: $(pgrep -af -- "$D/" | head -5)"
	status=1
fi
if ((status == 0)); then
	rm -rf "$D"
else
	k8s_log "kept $D for inspection; run down.sh again once fixed"
	rm -rf "$D/pids"
fi
k8s_log "teardown took $(echo "$(date +%s.%N) - $t0" | bc) s"
exit $status
