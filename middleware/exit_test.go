package middleware_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/middleware"
)

// TestResponseDoesNotWaitForTheAgentsExit: the response is sent once the
// CLI wrote its result, while the CLI is still exiting (30-80 ms for the
// real one, here until the test lets it); the request's tail waits for the
// exit before the sandbox goes, and a CLI that does not exit is killed
// ExitGrace after its result.
func TestResponseDoesNotWaitForTheAgentsExit(t *testing.T) {
	raw, err := os.ReadFile("../claude/testdata/recorded-2.1.330/plain.jsonl")
	require.NoError(t, err)
	for _, exits := range []bool{true, false} {
		name := map[bool]string{true: "exits", false: "never exits"}[exits]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withRouter(), withOptions(func(o *middleware.Options) {
				o.Runners = append(o.Runners, claude.New())
				o.ExitGrace = 2 * time.Second
			}))
			e.coder.Sandbox.Runner = "claude"
			release, exited := make(chan struct{}), make(chan error, 1)
			e.ex.OnCreate = func(sb *executortest.FakeSandbox) {
				sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
					if cmd.Args[0] != "claude" {
						return sb.HostExec(ctx, cmd)
					}
					_, _ = cmd.Stdout.Write(raw)
					if exits {
						<-release
					} else {
						<-ctx.Done()
					}
					exited <- ctx.Err()
					return executor.ExecResult{}, ctx.Err()
				}
			}
			h := e.o.Wrap(middleware.UnknownAssistant)
			resp, err := h.Handle(context.Background(), request("exit"), nil)
			require.NoError(t, err, "answered while the CLI still runs")
			assert.Contains(t, resp.Content, "2")
			select {
			case err := <-exited:
				t.Fatalf("the CLI ended (%v) before the response", err)
			default:
			}
			require.Eventually(t, func() bool { return slices.Contains(e.tr.get(), "route.close") }, time.Minute, 5*time.Millisecond,
				"the model route closes once the turn is answered, not when the CLI is gone")
			if exits {
				close(release)
				require.NoError(t, <-exited, "the CLI exited by itself")
			} else {
				require.ErrorIs(t, <-exited, context.Canceled, "killed after ExitGrace")
			}
			require.NoError(t, e.o.Settle(context.Background()))
			sbs := e.ex.Sandboxes()
			require.Len(t, sbs, 1)
			assert.True(t, sbs[0].Closed(), "the tail removed the sandbox after the exit")
		})
	}
}

// TestBackgroundWorkEndsTheAnswer: when the agent left a command in the
// background, the answer waits for the main turn its completion starts;
// a command that never completes (a dev server) holds the answer until
// the stall timeout, which then ends the run with what the agent said,
// not with an error.
func TestBackgroundWorkEndsTheAnswer(t *testing.T) {
	raw, err := os.ReadFile("../claude/testdata/recorded-2.1.330/background-bash.jsonl")
	require.NoError(t, err)
	first := bytes.Index(raw, []byte(`"type":"result"`))
	require.Positive(t, first)
	first += bytes.IndexByte(raw[first:], '\n') + 1
	for _, completes := range []bool{true, false} {
		name := map[bool]string{true: "the command completes", false: "the command never completes"}[completes]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withRouter(), withStall(2*time.Second), withOptions(func(o *middleware.Options) {
				o.Runners = append(o.Runners, claude.New())
			}))
			e.coder.Sandbox.Runner = "claude"
			e.ex.OnCreate = func(sb *executortest.FakeSandbox) {
				sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
					if cmd.Args[0] != "claude" {
						return sb.HostExec(ctx, cmd)
					}
					if completes {
						_, _ = cmd.Stdout.Write(raw)
						return executor.ExecResult{}, nil
					}
					_, _ = cmd.Stdout.Write(raw[:first])
					<-ctx.Done() // the CLI waits for its background command
					return executor.ExecResult{}, ctx.Err()
				}
			}
			h := e.o.Wrap(middleware.UnknownAssistant)
			resp, err := h.Handle(context.Background(), request("background"), nil)
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(resp.Content, "launched"), resp.Content)
			if completes {
				assert.Contains(t, resp.Content, "REPORT-TURN", "the completion's turn is part of the answer")
			} else {
				assert.NotContains(t, resp.Content, "REPORT-TURN")
			}
			require.NoError(t, e.o.Settle(context.Background()))
		})
	}
}
