package kubernetes

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestLogQuota: New tells the operator how workspace quotas are enforced
// and with which bound, watchdog on and off.
func TestLogQuota(t *testing.T) {
	for name, tc := range map[string]struct {
		interval time.Duration // negative turns the watchdog off
		want     []string
	}{
		"watchdog": {want: []string{"workspace quota: watchdog in the pod's helper", "measured every 2s"}},
		"off":      {interval: -time.Second, want: []string{"workspace quota: off in the pods", "the storage class's own"}},
	} {
		t.Run(name, func(t *testing.T) {
			var logs testenv.SyncBuffer
			o := Options{Image: "img:1", Namespace: "ns", QuotaInterval: tc.interval}
			o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs})
			o, err := o.withDefaults()
			require.NoError(t, err)
			newExecutor(o, nil, nil).logQuota()
			for _, w := range tc.want {
				assert.Contains(t, logs.String(), w)
			}
		})
	}
}
