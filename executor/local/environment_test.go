package local

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseEnvironment(t *testing.T) {
	env := parseEnvironment([]byte("os\tDebian GNU/Linux 12 (bookworm)\nkernel\t6.1.0\narch\tx86_64\n" +
		"tool:curl\tcurl 7.88.1 (x86_64-pc-linux-gnu) libcurl/7.88.1 OpenSSL/3.0.19\ntool:git\tgit version 2.39.5\ntool:node\t\nnoise\n"))
	assert.Equal(t, "Debian GNU/Linux 12 (bookworm)", env.OS)
	assert.Equal(t, "6.1.0", env.Kernel)
	assert.Equal(t, map[string]string{"curl": "curl 7.88.1 (x86_64-pc-linux-gnu)", "git": "git version 2.39.5"}, env.Tools, "empty versions are left out, long ones cut")
	env.Limits = "cgroup v1: memory"
	assert.Contains(t, env.Summary(), "Tools: curl (curl 7.88.1 (x86_64-pc-linux-gnu)), git (git version 2.39.5).")
	assert.Contains(t, env.Summary(), "Limits: cgroup v1: memory.")
}
