#!/usr/bin/env bash
# test.sh runs the Kubernetes backend's tests on a real offline single-node
# cluster: builds the binaries (cached in $K8S_CACHE), brings the cluster up,
# runs the cluster tests with AGENTBOX_K8S=1 (so under CI=true they fail
# rather than skip), and tears the cluster down whatever happened, checking
# the host is as before. Extra arguments go to `go test`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
cd "$here/../../.."
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
	# The gateway's own identity: the service account of
	# examples/kubernetes/rbac.yaml, with only what that manifest grants in
	# namespace agentbox. The claude e2e tests and the demo run as it.
	kc() { "$K8S_BIN/kubectl" --kubeconfig "$K8S_DIR/admin.kubeconfig" "$@"; }
	gw=$K8S_DIR/gateway.kubeconfig
	if kc apply -f examples/kubernetes/rbac.yaml >/dev/null && tok=$(kc -n agentbox create token agentbox-gateway --duration 2h); then
		server=$(kc config view --minify -o 'jsonpath={.clusters[0].cluster.server}')
		cat >"$gw" <<KC
apiVersion: v1
kind: Config
clusters:
- name: agentbox
  cluster: {server: "$server", certificate-authority: "$K8S_DIR/pki/ca.crt"}
users:
- name: agentbox-gateway
  user: {token: "$tok"}
contexts:
- name: agentbox
  context: {cluster: agentbox, user: agentbox-gateway, namespace: agentbox}
current-context: agentbox
KC
		chmod 0600 "$gw"
	else
		k8s_log "could not set up the gateway's service account"
		status=1
	fi
	AGENTBOX_K8S=1 AGENTBOX_KUBECONFIG=$K8S_DIR/admin.kubeconfig \
		${GO:-go} test ${TEST_FLAGS:--race -count=1 -timeout 15m} -v -run Cluster ./executor/kubernetes "$@" || status=$?
	# The real CLI in pods, against the scripted model.
	AGENTBOX_K8S=1 AGENTBOX_KUBECONFIG=$gw \
		${GO:-go} test ${TEST_FLAGS:--race -count=1 -timeout 15m} -v -run '^TestE2EKubernetes$' ./claude ./codex "$@" || status=$?
	# The session policy on pods: the chat's pod kept between turns; the
	# workspace following the conversation, and the checkpoint API.
	AGENTBOX_K8S=1 AGENTBOX_KUBECONFIG=$gw \
		${GO:-go} test ${TEST_FLAGS:--race -count=1 -timeout 15m} -v -run '^(TestE2ESessionPolicyKubernetes|TestE2ECheckpointsKubernetes)$' ./middleware "$@" || status=$?
	# The example gateway's demo on pods; two gateway processes sharing
	# chats, one killed -9; a request on pods beside one on Docker (the
	# admin's kubeconfig reads the API server's /metrics for its cost).
	AGENTBOX_K8S=1 AGENTBOX_KUBECONFIG=$gw AGENTBOX_K8S_METRICS_KUBECONFIG=$K8S_DIR/admin.kubeconfig \
		${GO:-go} test ${TEST_FLAGS:--race -count=1 -timeout 15m} -v -run '^(TestDemoKubernetes|TestReplicasKubernetes)$' \
		-bench '^BenchmarkRequestBackends$' -benchtime 3x ./examples/gateway "$@" || status=$?
	t3=$(date +%s)
else
	status=1
	t2=$(date +%s) t3=$t2
fi
"$here/down.sh" || status=1
k8s_log "build $((t1 - t0)) s, bring-up $((t2 - t1)) s, tests $((t3 - t2)) s, teardown $(($(date +%s) - t3)) s; status $status"
exit $status
