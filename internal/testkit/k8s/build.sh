#!/usr/bin/env bash
# build.sh builds (or reuses) the binaries an offline single-node cluster needs:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl and etcd
# from the Go module proxy, the CNI loopback plugin from Debian (extracted, never
# installed), a no-network CNI plugin and a pause image archive. Outputs go to
# $K8S_CACHE; a second run with the same versions does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

mkdir -p "$K8S_BIN" "$K8S_CACHE/gomod" "$K8S_CACHE/etcdmod" "$K8S_CACHE/deb"
export GOCACHE=${K8S_GOCACHE:-$K8S_CACHE/go-build}
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
nice=${K8S_NICE-nice -n 15} # K8S_NICE= (empty) builds at normal priority, as CI does
stamp=$K8S_BIN/.stamp
want="$K8S_VERSION $ETCD_VERSION"

if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
	k8s_log "binaries for $want are cached in $K8S_BIN"
else
	t0=$(date +%s)
	major=${K8S_VERSION#v}; major=${major%%.*}
	minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	mod=$K8S_CACHE/gomod
	{
		echo "module agentbox.local/k8sbuild"
		echo
		echo "go 1.24.0"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
			cloud-provider cluster-bootstrap code-generator component-base component-helpers \
			controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
			endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
			kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
			sample-apiserver sample-cli-plugin sample-controller; do
			echo "replace k8s.io/$m => k8s.io/$m $K8S_STAGING_VERSION"
		done
	} >"$mod/go.mod"
	# A package of the module so `go build` has a main module to resolve from.
	printf 'package k8sbuild\n' >"$mod/doc.go"
	for c in kube-apiserver kubelet kube-scheduler kube-controller-manager kubectl; do
		k8s_log "building $c"
		(cd "$mod" && $nice go build -trimpath -ldflags "$ld" -o "$K8S_BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c")
		mv "$K8S_BIN/$c.tmp" "$K8S_BIN/$c"
	done
	t1=$(date +%s)
	emod=$K8S_CACHE/etcdmod
	printf 'module agentbox.local/etcdbuild\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$emod/go.mod"
	printf 'package etcdbuild\n' >"$emod/doc.go"
	k8s_log "building etcd $ETCD_VERSION"
	(cd "$emod" && $nice go build -trimpath -ldflags "-s -w" -o "$K8S_BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
	mv "$K8S_BIN/etcd.tmp" "$K8S_BIN/etcd"
	t2=$(date +%s)
	k8s_log "built kube binaries in $((t1 - t0)) s, etcd in $((t2 - t1)) s"
	echo "$want" >"$stamp"
fi

# CNI loopback plugin from Debian, extracted so no postinst runs.
if [[ ! -x $K8S_BIN/cni/loopback ]]; then
	k8s_log "extracting containernetworking-plugins"
	(cd "$K8S_CACHE/deb" && apt-get download containernetworking-plugins >/dev/null)
	rm -rf "$K8S_CACHE/deb/x" && mkdir -p "$K8S_CACHE/deb/x" "$K8S_BIN/cni"
	dpkg-deb -x "$K8S_CACHE"/deb/containernetworking-plugins_*.deb "$K8S_CACHE/deb/x"
	for p in loopback bridge host-local; do
		cp "$K8S_CACHE/deb/x/usr/lib/cni/$p" "$K8S_BIN/cni/$p"
	done
fi
install -m 0755 "$here/cni-none" "$K8S_BIN/cni/agentbox-none"

# Pause image: a static Go binary that sleeps and reaps, packed as a docker-archive.
if [[ ! -f $K8S_CACHE/pause.tar || $here/pause/main.go -nt $K8S_CACHE/pause.tar ]]; then
	k8s_log "building the pause image"
	"$here/mkpause.sh" "$K8S_CACHE/pause.tar" "$K8S_PAUSE_IMAGE"
fi
k8s_log "build done"
