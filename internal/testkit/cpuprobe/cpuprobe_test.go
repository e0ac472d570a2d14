package cpuprobe

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseStat reads the fields the probe uses, with a comm holding spaces
// and parentheses.
func TestParseStat(t *testing.T) {
	line := []byte("42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 11 22 33 44 20 0 1 0 555 0 0")
	st, err := parseStat(line)
	require.NoError(t, err)
	assert.Equal(t, stat{comm: "a (b) c", ppid: 7, start: 555, t: times{own: 33, children: 77}}, st)
	_, err = parseStat([]byte("42 nocomm"))
	require.Error(t, err)
}

// TestChildCounted runs a short CPU-bound child the poll may never see: its
// CPU still counts, in the test process's children, from the reaped delta.
func TestChildCounted(t *testing.T) {
	p, err := Start(Options{Interval: time.Hour}) // one poll at start, one at stop
	require.NoError(t, err)
	out, err := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	r := p.Stop()
	t.Log(r)
	assert.Greater(t, r.Groups[GroupTestChild], 50*time.Millisecond, "the child's CPU")
	assert.LessOrEqual(t, r.Groups[GroupTestChild], r.Machine+2*clockTick, "no more than the machine spent")
}

// TestSeenChildNotDoubled watches a child the poll sees several times
// before it exits: it counts once (its own time while seen plus the tail
// from the reaped delta), not twice.
func TestSeenChildNotDoubled(t *testing.T) {
	p, err := Start(Options{Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	out, err := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	r := p.Stop()
	t.Log(r)
	assert.Greater(t, r.Groups[GroupTestChild], 50*time.Millisecond)
	assert.LessOrEqual(t, r.Groups[GroupTestChild], r.Wall+2*clockTick, "one single-threaded child cannot spend more than the wall time")
}
