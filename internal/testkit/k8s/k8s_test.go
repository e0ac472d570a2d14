package k8s

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cni runs the no-network CNI plugin like containerd does.
func cni(t *testing.T, command, id, conf string) (string, error) {
	t.Helper()
	cmd := exec.Command("./cni-none")
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id, "CNI_NETNS=/proc/1/ns/net", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent")
	cmd.Stdin = strings.NewReader(conf)
	out, err := cmd.Output()
	return string(out), err
}

func TestCNINone(t *testing.T) {
	conf := `{"cniVersion": "0.4.0", "name": "agentbox-none", "type": "agentbox-none"}`
	out, err := cni(t, "ADD", "abc123", conf)
	require.NoError(t, err)
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct{ Version, Address string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "0.4.0", res.CNIVersion)
	require.Len(t, res.IPs, 1)
	assert.Regexp(t, `^127\.\d+\.\d+\.\d+/32$`, res.IPs[0].Address)
	again, err := cni(t, "ADD", "abc123", conf)
	require.NoError(t, err)
	assert.Equal(t, out, again, "same sandbox, same placeholder")
	other, err := cni(t, "ADD", "def456", conf)
	require.NoError(t, err)
	assert.NotEqual(t, out, other)

	for _, c := range []string{"DEL", "CHECK"} {
		out, err := cni(t, c, "abc123", conf)
		require.NoError(t, err, c)
		assert.Empty(t, out, c)
	}
	out, err = cni(t, "VERSION", "", conf)
	require.NoError(t, err)
	assert.Contains(t, out, `"supportedVersions"`)
	_, err = cni(t, "BOGUS", "", conf)
	assert.Error(t, err)
	// The plugin creates nothing on the host: it never reads CNI_NETNS.
	b, err := os.ReadFile("cni-none")
	require.NoError(t, err)
	assert.NotContains(t, string(b), "CNI_NETNS")
}

func TestPauseArchive(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pause.tar")
	cmd := exec.Command("./mkpause.sh", out, "registry.k8s.io/pause:3.10")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run())
	f, err := os.Open(out)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[strings.TrimPrefix(h.Name, "./")] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	require.NoError(t, json.Unmarshal(files["manifest.json"], &manifest))
	require.Len(t, manifest, 1)
	m := manifest[0]
	assert.Equal(t, []string{"registry.k8s.io/pause:3.10"}, m.RepoTags)
	cfg := files[m.Config]
	require.NotNil(t, cfg, "config %s missing", m.Config)
	assert.Equal(t, strings.TrimSuffix(m.Config, ".json"), sum(cfg), "config name is its digest")
	var c struct {
		Config struct{ Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	require.NoError(t, json.Unmarshal(cfg, &c))
	assert.Equal(t, []string{"/pause"}, c.Config.Entrypoint)
	require.Len(t, m.Layers, 1)
	layer := files[m.Layers[0]]
	require.NotNil(t, layer)
	assert.Equal(t, []string{"sha256:" + sum(layer)}, c.RootFS.DiffIDs, "diff id is the layer's digest")
	lr := tar.NewReader(strings.NewReader(string(layer)))
	h, err := lr.Next()
	require.NoError(t, err)
	assert.Equal(t, "pause", h.Name)
	assert.NotZero(t, h.Mode&0o111, "pause is executable")
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
