package local_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func itoa(i int) string { return strconv.Itoa(i) }

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func syscallZero() os.Signal { return syscall.Signal(0) }

// processGone reports whether pid no longer runs (gone or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// hostPIDsOf lists the host's processes of uid whose command line contains
// substr.
func hostPIDsOf(t testing.TB, substr string, uid int) []int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		cmd, err := os.ReadFile(d + "/cmdline")
		if err != nil || !strings.Contains(strings.ReplaceAll(string(cmd), "\x00", " "), substr) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(d, &st) != nil || int(st.Uid) != uid {
			continue
		}
		out = append(out, atoi(filepath.Base(d)))
	}
	return out
}
