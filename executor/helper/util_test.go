package helper

import (
	"bytes"
	"fmt"
	"strconv"
)

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }

func itoa(i int) string { return strconv.Itoa(i) }

// isZombie reads the state field of /proc/<pid>/stat.
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
