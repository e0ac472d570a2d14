package executor

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseEnvironment(t *testing.T) {
	long := strings.Repeat("x", 500)
	env := ParseEnvironment([]byte("os\tDebian GNU/Linux 12 (bookworm)\nkernel\t6.1.0\narch\tx86_64\n" +
		"tool:curl\tcurl 7.88.1 (x86_64-pc-linux-gnu) libcurl/7.88.1 OpenSSL/3.0.19\ntool:git\tgit version 2.39.5\ntool:node\t\n" +
		"tool:rg\t" + long + "\ntool:busybox\tBusyBox v1.35.0 (Debian 1:1.35.0-4+b3) multi-call binary.\nnoise\n"))
	assert.Equal(t, "Debian GNU/Linux 12 (bookworm)", env.OS)
	assert.Equal(t, "6.1.0", env.Kernel)
	assert.Equal(t, map[string]string{"curl": "curl 7.88.1 (x86_64-pc-linux-gnu)", "git": "git version 2.39.5", "rg": long[:maxToolVersion], "busybox": "BusyBox v1.35.0"}, env.Tools,
		"empty versions are left out, long ones cut")
	env.Limits = "cgroup v1: memory"
	assert.Contains(t, env.Summary(), "Tools: busybox (BusyBox v1.35.0), curl (curl 7.88.1 (x86_64-pc-linux-gnu)), git (git version 2.39.5), rg (")
	assert.Contains(t, env.Summary(), "Limits: cgroup v1: memory.")
	assert.NotContains(t, env.Summary(), env.CapturedAt.Format("2006"), "the summary stays the same across snapshots")
}

// TestEnvironmentScriptOnThisHost runs the script with the host's shell:
// what it prints parses back.
func TestEnvironmentScriptOnThisHost(t *testing.T) {
	out, err := exec.Command("/bin/sh", "-c", EnvironmentScript()).Output()
	if err != nil {
		t.Fatalf("the snapshot script fails in /bin/sh: %v", err)
	}
	env := ParseEnvironment(out)
	assert.NotEmpty(t, env.OS)
	assert.NotEmpty(t, env.Kernel)
	assert.Contains(t, env.Tools, "git", "git is on every machine that runs these tests")
}
