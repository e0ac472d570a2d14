package executor

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// HostMemoryBytes returns this machine's memory, MemTotal of /proc/meminfo
// (0 when unknown): what config checks max_memory against and the
// middleware's admission control derives its memory bound from.
func HostMemoryBytes() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
