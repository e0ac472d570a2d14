// Package scripted is a stand-in agent for the middleware's tests and
// benchmarks: a Runner whose CLI output is JSON lines of events and a final
// result, and a Script that a fake sandbox's ExecFunc plays as that CLI.
// It is the agent, not the sandbox: the sandbox is executortest's fake, and
// the real runners (claude, cursor) replace this in end-to-end tests.
//
// Concurrency: a Runner is safe for concurrent use; a Script is a value.
package scripted

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/agentbox/agentbox/executor"
)

// Line is one line of the scripted agent's stdout: an event or the final
// result.
type Line struct {
	Event  *executor.Event      `json:"event,omitempty"`
	Result *executor.Completion `json:"result,omitempty"`
}

// Script is what the scripted agent does when a sandbox runs it.
type Script struct {
	Lines []Line
	// Block makes the agent wait for its context after the lines (a run
	// that does not end by itself).
	Block bool
	// Exit is the exit code; Err is Exec's error.
	Exit int
	Err  error
}

// Text is a script that streams texts and ends with a result whose content
// is their concatenation.
func Text(usage executor.Usage, texts ...string) Script {
	var s Script
	content := ""
	for _, t := range texts {
		s.Lines = append(s.Lines, Line{Event: &executor.Event{Kind: executor.EventText, Text: t}})
		content += t
	}
	s.Lines = append(s.Lines, Line{Result: &executor.Completion{Content: content, FinishReason: executor.FinishStop, Usage: usage}})
	return s
}

// Exec plays the script as the agent's process: usable as
// executortest.FakeSandbox.ExecFunc.
func (s Script) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	enc := json.NewEncoder(cmd.Stdout)
	for _, l := range s.Lines {
		if err := enc.Encode(l); err != nil {
			return executor.ExecResult{ExitCode: -1}, err
		}
	}
	if s.Block {
		<-ctx.Done()
		return executor.ExecResult{ExitCode: -1, Signal: "KILL"}, ctx.Err()
	}
	return executor.ExecResult{ExitCode: s.Exit}, s.Err
}

// Runner is the executor.Runner of the scripted agent, named "scripted".
type Runner struct {
	// InvocationErr, when set, makes Invocation fail with it.
	InvocationErr error
	// OnCall, when set, is told "invocation" and "parse" as they are called.
	OnCall func(string)

	mu   sync.Mutex
	reqs []executor.RunRequest
}

var _ executor.Runner = (*Runner)(nil)

// Name implements executor.Runner.
func (r *Runner) Name() string { return "scripted" }

func (r *Runner) called(s string) {
	if r.OnCall != nil {
		r.OnCall(s)
	}
}

// Invocation implements executor.Runner: argv names the model, stdin and
// the file .scripted/run.json hold the conversation.
func (r *Runner) Invocation(req executor.RunRequest) (executor.Invocation, error) {
	r.called("invocation")
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if r.InvocationErr != nil {
		return executor.Invocation{}, r.InvocationErr
	}
	stdin, err := json.Marshal(req.Messages)
	if err != nil {
		return executor.Invocation{}, err
	}
	return executor.Invocation{
		Args:  []string{"scripted-agent", "--model", req.Model},
		Env:   []string{"HOME=" + req.Home, "BASE_URL=" + req.ModelBaseURL, "KEY=" + req.APIKey},
		Stdin: stdin,
		Files: map[string][]byte{".scripted/run.json": stdin},
	}, nil
}

// Requests returns the requests Invocation got, in order.
func (r *Runner) Requests() []executor.RunRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// Parse implements executor.Runner over the script's JSON lines.
func (r *Runner) Parse(ctx context.Context, stdout io.Reader, emit func(executor.Event) error) (executor.Completion, error) {
	r.called("parse")
	br := bufio.NewReader(stdout)
	var result *executor.Completion
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			var l Line
			if jerr := json.Unmarshal(b, &l); jerr != nil {
				return executor.Completion{}, fmt.Errorf("scripted: bad line %q: %w", b, jerr)
			}
			switch {
			case l.Event != nil:
				if eerr := emit(*l.Event); eerr != nil {
					return executor.Completion{}, eerr
				}
			case l.Result != nil:
				result = l.Result
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return executor.Completion{}, fmt.Errorf("scripted: read: %w", err)
		}
	}
	if result == nil {
		return executor.Completion{}, errors.New("scripted: the stream ended without a result")
	}
	return *result, ctx.Err()
}
