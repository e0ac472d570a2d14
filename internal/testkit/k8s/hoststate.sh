#!/usr/bin/env bash
# hoststate.sh prints what the cluster must leave as it found it: mounts,
# iptables rules, network links, the sysctls the kubelet likes to set, and
# the host paths the kubelet and containerd's CRI create outside K8S_DIR.
set -uo pipefail
echo "## mounts"
awk '{print $5, $9, $10}' /proc/self/mountinfo | sort
echo "## iptables"
for t in iptables-save ip6tables-save; do
	command -v $t >/dev/null && $t 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]/[]/'
done
echo "## links"
ip -o link show | awk -F': ' '{print $2}' | sort
echo "## sysctls"
for k in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops \
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward \
	net/bridge/bridge-nf-call-iptables; do
	[[ -r /proc/sys/$k ]] && echo "$k=$(cat /proc/sys/$k)"
done
echo "## paths"
for p in /var/lib/cni /var/log/pods /var/log/containers /run/netns /var/run/netns /var/lib/kubelet /etc/kubernetes; do
	[[ -e $p ]] && echo "$p"
done
ls -d /sys/fs/cgroup/*/kubepods* 2>/dev/null
true
