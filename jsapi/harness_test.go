package jsapi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/jsapi"
)

// jsCase is one JS snippet: body is the body of a function whose return
// value is the result, run inside Create(ctx, messages, options).
type jsCase struct {
	body      string
	files     map[string]string // workspace files written before the hook
	noSandbox bool
	hc        func(*hooks.Context)
	// want is the JSON of the result; wantErr a substring of the hook's
	// error; wantErrIs a sentinel in its chain; wantLine the body line the
	// error points at (checked in the .js and the .ts file).
	want      string
	wantErr   string
	wantErrIs error
	wantLine  int
	check     func(t *testing.T, sb *executortest.FakeSandbox, hc *hooks.Context)
}

// The wrappers around a case body, in JavaScript and in TypeScript. The TS
// one has an extra leading line (an interface esbuild erases), so a
// position that points at the right .ts line proves the source map works.
const (
	jsHead = "function Create(ctx, messages, options) {\n  const result = (function () {\n"
	tsHead = "interface Msg { role: string; content: string }\n" +
		"function Create(ctx: any, messages: Msg[], options: Record<string, unknown>): { messages: Msg[] } {\n" +
		"  const result: unknown = (function (): unknown {\n"
	tail = "\n  })();\n  return { messages: [{ role: \"result\", content: JSON.stringify(result === undefined ? null : result) }] };\n}\n"
)

var langs = []struct {
	name, file, head string
}{
	{"js", "src/index.js", jsHead},
	{"ts", "src/index.ts", tsHead},
}

func testOptions() jsapi.Options {
	return jsapi.Options{Timeout: 2 * time.Second}
}

// runCases runs every case in JavaScript and in TypeScript.
func runCases(t *testing.T, cases map[string]jsCase) {
	t.Helper()
	for name, tc := range cases {
		for _, lang := range langs {
			t.Run(name+"/"+lang.name, func(t *testing.T) {
				h, err := jsapi.Compile(lang.file, []byte(lang.head+tc.body+tail), testOptions())
				require.NoError(t, err)
				sb := executortest.NewSandbox(t)
				sb.ExecFunc = sb.HostExec
				for name, content := range tc.files {
					p := filepath.Join(sb.Dir(), filepath.FromSlash(name))
					require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
					require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
				}
				hc := &hooks.Context{UserID: "u1", ChatID: "c1", AssistantID: "coder", Sandbox: sb}
				if tc.noSandbox {
					hc.Sandbox = nil
				}
				if tc.hc != nil {
					tc.hc(hc)
				}
				res, err := h.Create(context.Background(), hc, []executor.Message{{Role: "user", Content: "hi"}})
				if tc.wantErr != "" || tc.wantErrIs != nil {
					require.Error(t, err)
					assert.ErrorContains(t, err, tc.wantErr)
					if tc.wantErrIs != nil {
						assert.ErrorIs(t, err, tc.wantErrIs)
					}
					if tc.wantLine > 0 {
						var he *hooks.HookError
						require.ErrorAs(t, err, &he)
						headLines := strings.Count(lang.head, "\n")
						assert.True(t, strings.HasPrefix(he.Position, fmt.Sprintf("%s:%d:", lang.file, headLines+tc.wantLine)),
							"position %q, want %s line %d", he.Position, lang.file, headLines+tc.wantLine)
					}
				} else {
					require.NoError(t, err)
					require.NotNil(t, res)
					require.Len(t, res.Messages, 1)
					assert.JSONEq(t, tc.want, res.Messages[0].Content)
				}
				if tc.check != nil {
					tc.check(t, sb, hc)
				}
			})
		}
	}
}

// logSink is an hclog.Logger writing into a buffer, for log assertions.
func logSink(level hclog.Level) (hclog.Logger, *strings.Builder) {
	var b strings.Builder
	return hclog.New(&hclog.LoggerOptions{Output: &b, Level: level, DisableTime: true}), &b
}

// lagProbe measures, while it runs, how late this machine wakes a
// goroutine that sleeps for a millisecond at a time: the scheduling delay
// a loaded machine (CPU hogs, GC, the whole suite under -race) adds to
// every timer and every handoff between goroutines, including a hook's
// budget and its interrupt. Tests that bound how far past a deadline a
// hook may end add a multiple of the worst lag seen over the same
// interval, a margin measured in the same run rather than a constant.
type lagProbe struct {
	stop chan struct{}
	done chan time.Duration
}

// startLagProbe starts measuring; the caller must call worst.
func startLagProbe() *lagProbe {
	p := &lagProbe{stop: make(chan struct{}), done: make(chan time.Duration, 1)}
	go func() {
		var worst time.Duration
		tick := time.NewTimer(time.Millisecond)
		defer tick.Stop()
		for {
			t0 := time.Now()
			tick.Reset(time.Millisecond)
			select {
			case <-p.stop:
				p.done <- worst
				return
			case <-tick.C:
			}
			worst = max(worst, time.Since(t0)-time.Millisecond)
		}
	}()
	return p
}

// worst stops the probe and returns the worst lag it saw.
func (p *lagProbe) worst() time.Duration {
	close(p.stop)
	return <-p.done
}

// overshoot is how far past a deadline an action measured with p may end:
// 100 ms, plus twice the worst scheduling lag seen meanwhile and twice pace
// (the duration of one healthy invocation, measured in the same run; zero
// where none was measured).
func overshoot(p *lagProbe, pace time.Duration) (allowed, lag time.Duration) {
	lag = p.worst()
	return 100*time.Millisecond + 2*lag + 2*pace, lag
}
