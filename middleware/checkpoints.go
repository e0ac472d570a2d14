package middleware

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/hooks"
)

// The workspace follows the conversation.
//
// With a backend that keeps checkpoints (executor.Checkpointer), a chat's
// workspace is checkpointed when the chat starts (before its first turn)
// and at the end of every turn, after the Next hook and off the response
// path, once no agent process runs (the container removed, or kept after
// its reset). A turn's checkpoint is labelled with the hash of the
// conversation it ended (conversationChain: the client's messages and the
// answer the client got) and its length, the chat's start with
// chatStart.
//
// A request whose history returns to an earlier point (a regenerated
// answer, an edited turn, a branch after an earlier answer: the kept
// history is everything but its last user message) has its workspace put
// back to the checkpoint of that point, before its sandbox starts and
// before the Create hook runs; a kept container's pre-started CLI is
// discarded when files changed under it. One user message alone returns
// to the chat's start only once the chat's conversation was longer than
// one exchange: a client that sends no history looks the same as an edit
// of the first message, and its workspace is carried over as before.
// Where that checkpoint is gone
// (evicted, or the chat predates checkpoints), the request runs on the
// current files and says so: an EventSandbox "checkpoint_missing" and a
// log line.
//
// A client sandbox's workspace is shared by its chats, so one chat's
// history cannot rewind it: its turns are checkpointed (labelled with the
// chat) and it is restored or forked through the explicit API only.

// Labels of checkpoints besides a turn's conversation hash.
const (
	// chatStart is the checkpoint of a chat's workspace before its first
	// turn.
	chatStart = "start"
	// unanswered is the label of a turn that ended without an answer: a
	// request of the chat goes back from it to its kept history.
	unanswered = "unanswered"
)

// Texts of the checkpoint EventSandbox events.
const (
	// SandboxRestored: the workspace was put back to the checkpoint of
	// the point the history returned to (Event.Sandbox.Checkpoint).
	SandboxRestored = "checkpoint_restored"
	// SandboxCheckpointMissing: the history returned to a point whose
	// checkpoint is gone; the request runs on the current files.
	SandboxCheckpointMissing = "checkpoint_missing"
)

// Checkpoints configure the checkpoints of an assistant's workspaces (on
// by default wherever the backend keeps them).
type Checkpoints struct {
	// Off turns them off.
	Off bool
	// Bounds bound one workspace's checkpoints (zero fields: the
	// gateway's Options.Checkpoints, else the executor's defaults).
	Bounds executor.CheckpointBounds
}

// checkpointer is the executor's Checkpointer when it keeps checkpoints
// and the assistant has them on, else nil.
func (r *run) checkpointer() executor.Checkpointer {
	if r.a.Sandbox.Checkpoints.Off || r.o.opts.Checkpoints.Off {
		return nil
	}
	return r.o.checkpoints // nil without the capability
}

// checkpointBounds are the run's bounds: the assistant's, else the
// gateway's, field by field.
func (r *run) checkpointBounds() executor.CheckpointBounds {
	b := r.a.Sandbox.Checkpoints.Bounds
	if b.Count == 0 {
		b.Count = r.o.opts.Checkpoints.Bounds.Count
	}
	if b.Bytes == 0 {
		b.Bytes = r.o.opts.Checkpoints.Bounds.Bytes
	}
	return b
}

// checkpointTimeout bounds a checkpoint or a restore.
const checkpointTimeout = 2 * time.Minute

// rewind runs before the sandbox starts (the place's lease held, no agent
// process in the workspace): it takes the chat's start checkpoint when the
// chat has none, and puts the workspace back when the request's history
// returns to an earlier point than the workspace's. It reports what it did
// as an event and on r (for the hooks' ctx.checkpoint).
func (r *run) rewind(ctx context.Context) {
	cp := r.checkpointer()
	if cp == nil || r.prewarming {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	list, head, err := cp.Checkpoints(ctx, r.place.user, r.place.chat)
	if err != nil {
		r.log.Warn("the chat's checkpoints cannot be read; the request runs on the current files", "error", err)
		return
	}
	want := keptLabel(r.req.Messages)
	if len(list) == 0 {
		// The chat's first checkpoint: its start, or, for a chat from
		// before checkpoints, the point its history is at.
		label := want
		if r.client != nil {
			label = chatStart
		}
		info, err := cp.TakeCheckpoint(ctx, r.place.user, r.place.chat, label, r.checkpointBounds())
		if err != nil {
			r.log.Warn("the chat's start could not be checkpointed", "error", err)
			return
		}
		r.checkpoint = &hooks.Checkpoint{ID: info.ID, Label: info.Label}
		return
	}
	if r.client != nil {
		// Shared by the sandbox's chats: no history rewinds it.
		r.checkpoint = &hooks.Checkpoint{ID: head, Label: labelOf(list, head)}
		return
	}
	target := findLabel(list, want)
	if want == chatStart && depthOf(labelOf(list, head)) <= 2 {
		// One user message on a chat whose last turn ended a one-exchange
		// conversation: an edit of the first message, or a client that
		// sends no history (each request one message, the workspace
		// carried over, as before checkpoints). They look the same, so
		// the workspace stays; a client that sends histories is told
		// apart once its conversation is longer.
		r.checkpoint = &hooks.Checkpoint{ID: head, Label: labelOf(list, head)}
		return
	}
	switch target {
	case "":
		r.log.Info("the history returns to a point whose workspace checkpoint is gone (evicted, or from before checkpoints); the request runs on the current files",
			"head", head, "checkpoints", len(list))
		r.checkpoint = &hooks.Checkpoint{ID: head, Label: labelOf(list, head), Missing: true}
		_ = r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxCheckpointMissing})
		return
	case head:
		r.checkpoint = &hooks.Checkpoint{ID: head, Label: want}
		return
	}
	t0 := time.Now()
	res, err := cp.RestoreCheckpoint(ctx, r.place.user, r.place.chat, target)
	if err != nil {
		r.log.Warn("the workspace could not be put back to the history's checkpoint; the request runs on what is there", "checkpoint", target, "error", err)
		r.checkpoint = &hooks.Checkpoint{ID: head, Label: labelOf(list, head), Missing: true}
		_ = r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxCheckpointMissing})
		return
	}
	r.log.Info("the workspace follows the history back", "checkpoint", target, "written", res.Written, "removed", res.Removed, "took", time.Since(t0))
	r.checkpoint = &hooks.Checkpoint{ID: target, Label: want, Restored: true}
	if pre := r.warm.preCLI(); pre != nil && (res.Written > 0 || res.Removed > 0) {
		// It started over the files it would not find any more.
		pre.discard(r.o.opts.TeardownTimeout)
		r.warm.pre = nil
	}
	_ = r.send(executor.Event{Kind: executor.EventSandbox, Text: SandboxRestored, Sandbox: &executor.SandboxInfo{Checkpoint: target}})
}

// checkpointTurn checkpoints the place's workspace at the end of the turn
// (the sandbox removed or kept, so no agent process runs), labelled with
// the conversation it ended.
func (r *run) checkpointTurn(ctx context.Context) {
	cp := r.checkpointer()
	if cp == nil || r.prewarming {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	label := unanswered
	if r.answered {
		conv := append(r.req.Messages[:len(r.req.Messages):len(r.req.Messages)], executor.Message{Role: "assistant", Content: r.answer})
		label = conversationLabel(conversationChain(conv))
	}
	if r.client != nil {
		label = r.req.ChatID + ":" + label
	}
	t0 := time.Now()
	info, err := cp.TakeCheckpoint(ctx, r.place.user, r.place.chat, label, r.checkpointBounds())
	if err != nil {
		level := r.log.Warn
		if errors.Is(err, executor.ErrNoSpace) {
			level = r.log.Info
		}
		level("the turn's workspace could not be checkpointed; a later rewind to it runs on the current files", "error", err)
		return
	}
	r.log.Debug("workspace checkpointed", "checkpoint", info.ID, "changed", info.Changed, "new_bytes", info.NewBytes, "took", time.Since(t0))
}

// keptLabel is the label of the checkpoint a request's history returns
// to: the conversation without its last user message, chatStart when
// nothing is left.
func keptLabel(msgs []executor.Message) string {
	kept := msgs
	if n := len(kept); n > 0 && kept[n-1].Role == "user" {
		kept = kept[:n-1]
	}
	chain := conversationChain(kept)
	if len(chain) == 0 {
		return chatStart
	}
	return conversationLabel(chain)
}

// conversationLabel labels the checkpoint that ends the conversation of
// chain: its length (user and assistant messages) and its hash.
func conversationLabel(chain []string) string {
	return strconv.Itoa(len(chain)) + ":" + chain[len(chain)-1]
}

// depthOf is how many messages the conversation a label ends holds, 0
// for the chat's start and for labels without one.
func depthOf(label string) int {
	n, _, ok := strings.Cut(label, ":")
	if !ok {
		return 0
	}
	d, _ := strconv.Atoi(n)
	return d
}

// findLabel is the newest checkpoint of list labelled label, or "".
func findLabel(list []executor.CheckpointInfo, label string) string {
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Label == label {
			return list[i].ID
		}
	}
	return ""
}

// labelOf is checkpoint id's label, or "".
func labelOf(list []executor.CheckpointInfo, id string) string {
	for _, c := range list {
		if c.ID == id {
			return c.Label
		}
	}
	return ""
}
