package local

import (
	"context"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/checkpoint"
)

// The chats' workspace checkpoints (executor.Checkpointer) live in
// {data}/checkpoints, beside the workspaces, which no sandbox sees: the
// Executor's embedded checkpoint.Host. Each call takes the chat's file
// lock, as Create does; the caller holds the chat's lease and calls while
// no sandbox runs on the workspace. Local mode sweeps no workspaces, so a
// chat's checkpoints stay until its workspace is removed by hand.

var _ executor.Checkpointer = (*Executor)(nil)

// checkpoints is checkpoint.Host under a name that stays unexported when
// the Executor embeds it.
type checkpoints = checkpoint.Host

// newCheckpoints is the Executor's Checkpointer, locking chats as Create
// does.
func (e *Executor) newCheckpoints() (*checkpoints, error) {
	layout, err := executor.OpenWorkspaceLayout(e.o.DataDir)
	if err != nil {
		return nil, err
	}
	h, err := checkpoint.NewHost(e.o.DataDir, layout, sandboxUID(DefaultUID), sandboxGID(DefaultGID))
	if err != nil {
		return nil, err
	}
	h.Lock = func(ctx context.Context, user, chat string) (func(), error) {
		f, err := e.lockChat(ctx, user, chat, executor.DefaultLeaseWait)
		if err != nil {
			return nil, err
		}
		return func() { _ = f.Close() }, nil
	}
	return h, nil
}
