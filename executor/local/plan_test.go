package local

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
)

// TestPlanTakesTheTable: newPlan's defaults and bounds are executor's
// table, refused with the table's messages.
func TestPlanTakesTheTable(t *testing.T) {
	o, err := Options{DataDir: t.TempDir(), HelperBinary: "/bin/true"}.withDefaults()
	require.NoError(t, err)
	e := &Executor{o: o}
	executortest.RunSpecTable(t, func(s executor.Spec) (executor.Spec, error) {
		p, err := e.newPlan(s)
		return p.spec, err
	})
}
