package docker

import (
	"context"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/checkpoint"
)

// The chats' workspace checkpoints (executor.Checkpointer) live in
// {data}/checkpoints, beside ws/, which no container mounts: the
// Executor's embedded checkpoint.Host. Each call takes the chat's file
// lock, as Create does, so that a gateway process sharing the data
// directory cannot start a sandbox on the workspace meanwhile; the caller
// holds the chat's lease in this process and calls while no sandbox holds
// the chat (before Create, after Close or Park). Workspaces in loop quota
// mode are images mounted only while a sandbox runs, so that mode keeps no
// checkpoints.

var _ executor.Checkpointer = (*Executor)(nil)

// checkpoints is checkpoint.Host under a name that stays unexported when
// the Executor embeds it.
type checkpoints = checkpoint.Host

// newCheckpoints is the Executor's Checkpointer, locking chats as Create
// does.
func (e *Executor) newCheckpoints() (*checkpoints, error) {
	h, err := checkpoint.NewHost(e.o.DataDir, e.layout, executor.DefaultUID, executor.DefaultGID)
	if err != nil {
		return nil, err
	}
	h.Lock = func(ctx context.Context, user, chat string) (func(), error) {
		l, err := e.lockChat(ctx, user, chat, executor.DefaultLeaseWait)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Close() }, nil
	}
	return h, nil
}
