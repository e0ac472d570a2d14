package agentbox_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPackageMaps: the package tables of README.md ("## Design") and
// DESIGN.md ("## Packages and who may import what") name every package
// `go list ./...` lists, and nothing else: a claim of the docs is a
// test.
func TestPackageMaps(t *testing.T) {
	out, err := exec.Command("go", "list", "./...").Output()
	require.NoError(t, err)
	const module = "github.com/agentbox/agentbox"
	var want []string
	for _, p := range strings.Fields(string(out)) {
		if p == module {
			want = append(want, "agentbox")
			continue
		}
		want = append(want, strings.TrimPrefix(p, module+"/"))
	}
	slices.Sort(want)
	for file, section := range map[string]string{"README.md": "## Design", "DESIGN.md": "## Packages and who may import what"} {
		got := packageTable(t, file, section)
		assert.Equal(t, want, got, "%s, %s: the table's first column names each package once", file, section)
	}
}

// packageTable returns the code spans of the first column of the first
// table after heading in file, sorted.
func packageTable(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	text := string(b)
	i := strings.Index(text, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "%s has no %q", file, heading)
	span := regexp.MustCompile("`([^`]+)`")
	var got []string
	inTable := false
	for _, line := range strings.Split(text[i+len(heading)+2:], "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			inTable = true
			cells := strings.Split(line, "|")
			for _, m := range span.FindAllStringSubmatch(cells[1], -1) {
				got = append(got, m[1])
			}
		case inTable:
			slices.Sort(got)
			return got
		}
	}
	slices.Sort(got)
	return got
}
