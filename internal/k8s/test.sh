#!/usr/bin/env bash
# test.sh runs the Kubernetes backend's tests on a real offline single-node
# cluster: builds the binaries (cached in $K8S_CACHE), brings the cluster up,
# runs the cluster tests with AGENTBOX_K8S=1 (so under CI=true they fail
# rather than skip), and tears the cluster down whatever happened, checking
# the host is as before. Extra arguments go to `go test`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
cd "$here/../.."
# Tools the scripts use that a bare Debian may lack.
need=()
for c in openssl:openssl bc:bc ctr:containerd unshare:util-linux ip:iproute2 iptables-save:iptables; do
	command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
if ((${#need[@]})); then
	k8s_log "installing Debian packages: ${need[*]}"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || exit 1
fi
t0=$(date +%s)
"$here/build.sh" || exit 1
t1=$(date +%s)
status=0
if "$here/up.sh"; then
	t2=$(date +%s)
	AGENTBOX_K8S=1 AGENTBOX_KUBECONFIG=$K8S_DIR/admin.kubeconfig \
		${GO:-go} test ${TEST_FLAGS:--race -count=1 -timeout 30m} -v -run Cluster ./executor/kubernetes "$@" || status=$?
	# The real CLI in pods, against the scripted model.
	AGENTBOX_K8S=1 AGENTBOX_KUBECONFIG=$K8S_DIR/admin.kubeconfig \
		${GO:-go} test ${TEST_FLAGS:--race -count=1 -timeout 30m} -v -run '^TestE2EKubernetes$' ./claude "$@" || status=$?
	t3=$(date +%s)
else
	status=1
	t2=$(date +%s) t3=$t2
fi
"$here/down.sh" || status=1
k8s_log "build $((t1 - t0)) s, bring-up $((t2 - t1)) s, tests $((t3 - t2)) s, teardown $(($(date +%s) - t3)) s; status $status"
exit $status
