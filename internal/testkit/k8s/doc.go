// Package k8s holds the offline single-node Kubernetes cluster the
// Kubernetes backend's tests run against: build.sh (binaries from the Go
// module proxy, cached in /var/cache/agentbox-k8s), up.sh and down.sh
// (bring-up on 127.0.0.1 and a teardown that checks the host against a
// baseline), the no-network CNI plugin cni-none and the pause image
// (pause/, packed by mkpause.sh). See README.md for timings and the
// workarounds this machine needs. The Go tests here check the plugin and
// the image archive; they need no cluster.
package k8s
