package runnerkit

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// IntArg accepts a whole number in [lo, hi] as a sandbox argument: JSON
// numbers arrive as float64, a YAML or Go caller's as int, a string holding
// one is read too. The error says what to use instead.
func IntArg(v any, lo, hi int) (int, error) {
	var n float64
	switch x := v.(type) {
	case int:
		n = float64(x)
	case int64:
		n = float64(x)
	case float64:
		n = x
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, fmt.Errorf("is %q, not a number", x)
		}
		n = f
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, fmt.Errorf("is %q, not a number", x)
		}
		n = f
	default:
		return 0, fmt.Errorf("is %v (%T), not a number", v, v)
	}
	if n != math.Trunc(n) || n < float64(lo) || n > float64(hi) {
		return 0, fmt.Errorf("is %v; use a whole number from %d to %d", v, lo, hi)
	}
	return int(n), nil
}
