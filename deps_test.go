package agentbox_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDockerGatewayLinksNoKubernetes: a gateway that wires agentbox.New
// with the default (Docker) backend, examples/mount, links no Kubernetes
// package: the backend choice is typed, and kubernetes.Options comes only
// with the gateway's own import of executor/kubernetes. (Before: 860
// packages, 278 of them k8s.io; after: 473 and none.)
func TestDockerGatewayLinksNoKubernetes(t *testing.T) {
	for _, pkg := range []string{".", "./examples/mount"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		require.NoError(t, err, "go list -deps %s", pkg)
		var k8s []string
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") || strings.HasSuffix(p, "/executor/kubernetes") {
				k8s = append(k8s, p)
			}
		}
		assert.Empty(t, k8s, "%s links Kubernetes packages", pkg)
	}
}
