package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
)

// TestClaudeTranscriptsThroughTheAdapter plays every real Claude Code CLI
// transcript of the claude package's testdata as the agent's stdout in a
// fake sandbox, with the real claude runner, the Orchestrator and the
// adapter, and reads it with openai-go: streamed and non-streamed answers
// agree with each other and with what the claude parser alone makes of the
// transcript; failed runs are OpenAI errors; tool activity reaches the
// extension.
func TestClaudeTranscriptsThroughTheAdapter(t *testing.T) {
	var files []string
	for _, dir := range []string{"cli-2.1.197", "recorded-2.1.330"} { // the previous pin and the pin
		m, err := filepath.Glob(filepath.Join("..", "..", "claude", "testdata", dir, "*.jsonl"))
		require.NoError(t, err)
		require.NotEmpty(t, m, dir)
		files = append(files, m...)
	}
	for _, file := range files {
		t.Run(filepath.Base(filepath.Dir(file))+"/"+strings.TrimSuffix(filepath.Base(file), ".jsonl"), func(t *testing.T) {
			transcript, err := os.ReadFile(file)
			require.NoError(t, err)
			// The oracle: the claude parser alone.
			var want struct{ tools int }
			comp, perr := claude.New().Parse(context.Background(), bytes.NewReader(transcript), func(ev executor.Event) error {
				if ev.Kind == executor.EventToolUse {
					want.tools++
				}
				return nil
			})
			failed := perr != nil || comp.IsError && comp.FinishReason != executor.FinishMaxTurns

			st := newStack(t, withRunner(claude.New()))
			play := func(_ context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
				if _, err := cmd.Stdout.Write(transcript); err != nil {
					return executor.ExecResult{ExitCode: -1}, err
				}
				if failed {
					return executor.ExecResult{ExitCode: 1}, nil
				}
				return executor.ExecResult{}, nil
			}
			st.setExec("1", play)
			st.setExec("2", play)
			client := sdkClient(st)

			got, err := client.Chat.Completions.New(context.Background(), params("alice:1"))
			if failed {
				var apiErr *sdk.Error
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, 502, apiErr.StatusCode)
				assert.Equal(t, "agent_failed", apiErr.Code)
				if perr == nil && len(comp.Errors) > 0 {
					assert.Contains(t, apiErr.Message, comp.Errors[0], "the CLI's error reaches the client")
				}
			} else {
				require.NoError(t, err)
				assert.Equal(t, comp.Content, got.Choices[0].Message.Content)
				assert.Equal(t, map[string]string{"stop": "stop", "length": "length"}[comp.FinishReason], got.Choices[0].FinishReason)
				assert.Equal(t, metered.usage.InputTokens, got.Usage.PromptTokens, "usage is what the model route metered")
				var ext struct {
					Usage executor.Usage `json:"usage"`
				}
				require.NoError(t, json.Unmarshal([]byte(got.JSON.ExtraFields["agentbox"].Raw()), &ext))
				assert.Equal(t, comp.Usage, ext.Usage, "the CLI's own report travels in the extension")
			}

			p := params("alice:2")
			p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
			stream := client.Chat.Completions.NewStreaming(context.Background(), p)
			var text strings.Builder
			tools := 0
			for stream.Next() {
				c := stream.Current()
				if len(c.Choices) > 0 {
					text.WriteString(c.Choices[0].Delta.Content)
				}
				if f, ok := c.JSON.ExtraFields["agentbox"]; ok && strings.Contains(f.Raw(), `"kind":"tool_use"`) {
					tools++
				}
			}
			_ = stream.Close()
			if failed {
				assert.ErrorContains(t, stream.Err(), "agent_failed")
				return
			}
			require.NoError(t, stream.Err())
			assert.Equal(t, got.Choices[0].Message.Content, text.String(), "streamed text == non-streamed content")
			assert.Equal(t, want.tools, tools, "every tool call reaches the extension")
		})
	}
}
