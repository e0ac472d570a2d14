package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// The explicit API: a client lists, restores and forks the checkpoints of
// its chats and client sandboxes (middleware/openai serves it over HTTP).
// Each call takes the place's lease as a request does, so that it never
// meets a run, and a restore first removes the place's kept container,
// whose processes and pre-started CLI saw the files it replaces.

// CheckpointManager is the explicit checkpoint API an adapter serves (the
// Orchestrator is one).
type CheckpointManager interface {
	Checkpoints(ctx context.Context, user, chat, sandbox string) (CheckpointList, error)
	RestoreCheckpoint(ctx context.Context, user, chat, sandbox, id string) (executor.RestoreInfo, error)
	ForkChat(ctx context.Context, user, from, id, to string) (executor.CheckpointInfo, error)
	ForkSandbox(ctx context.Context, user, from, id string, count int, c SandboxCreate) ([]ClientSandbox, error)
}

var _ CheckpointManager = (*Orchestrator)(nil)

// CheckpointList is a place's checkpoints, oldest first, and the one its
// workspace was last taken as or put back to.
type CheckpointList struct {
	Checkpoints []executor.CheckpointInfo
	Head        string
}

// MaxForks bounds the client sandboxes one ForkSandbox makes.
const MaxForks = 16

// checkpointPlace is the place of a user's chat, or of their client
// sandbox when sandbox is set, with the assistant whose bounds apply
// (nil for a chat: any of the chat's assistants may have checkpointed it).
func (o *Orchestrator) checkpointPlace(ctx context.Context, user, chat, sandbox string) (chatID, *Assistant, error) {
	if o.checkpoints == nil || o.opts.Checkpoints.Off {
		return chatID{}, nil, &Error{Kind: KindBadRequest, Message: fmt.Sprintf("this gateway keeps no workspace checkpoints (the %s backend, or Options.Checkpoints.Off)", o.caps.Backend)}
	}
	if err := executor.ValidateID("user", user); err != nil {
		return chatID{}, nil, &Error{Kind: KindBadRequest, Param: "user", Err: err, Message: "a valid user id is needed: " + unwrapMessage(err)}
	}
	if sandbox == "" {
		if err := executor.ValidateID("chat", chat); err != nil {
			return chatID{}, nil, &Error{Kind: KindBadRequest, Param: "chat", Err: err, Message: "a valid chat id is needed: " + unwrapMessage(err)}
		}
		if isSandboxChat(chat) {
			return chatID{}, nil, &Error{Kind: KindBadRequest, Param: "chat", Message: "name the client sandbox instead of its workspace key"}
		}
		return chatID{user, chat}, nil, nil
	}
	s, a, err := o.checkpointPlaceSandbox(ctx, user, sandbox)
	if err != nil {
		return chatID{}, nil, err
	}
	return s.place(), inSandbox(a, s), nil
}

// checkpointError classifies a Checkpointer's error.
func checkpointError(err error, id string) error {
	switch {
	case errors.Is(err, executor.ErrNotFound):
		return &Error{Kind: KindNotFound, Param: "checkpoint", Err: err, Message: fmt.Sprintf("there is no checkpoint %q here (never taken, or evicted); list them with GET .../checkpoints", id)}
	case errors.Is(err, executor.ErrBusy):
		return Errorf(KindBusy, err, "the workspace is busy with a request; wait for it to finish and send again")
	case errors.Is(err, executor.ErrNoSpace):
		return Errorf(KindBadRequest, err, "the checkpoint does not fit its bounds; raise sandbox.checkpoints.max_bytes")
	case errors.Is(err, executor.ErrInvalid):
		return Errorf(KindBadRequest, err, "%s", unwrapMessage(err))
	}
	return Errorf(KindInternal, err, "the checkpoint call failed; the gateway's log has the details")
}

// Checkpoints lists the checkpoints of user's chat, or of their client
// sandbox when sandbox is set.
func (o *Orchestrator) Checkpoints(ctx context.Context, user, chat, sandbox string) (CheckpointList, error) {
	place, _, err := o.checkpointPlace(ctx, user, chat, sandbox)
	if err != nil {
		return CheckpointList{}, err
	}
	list, head, err := o.checkpoints.Checkpoints(ctx, place.user, place.chat)
	if err != nil {
		return CheckpointList{}, checkpointError(err, "")
	}
	return CheckpointList{Checkpoints: list, Head: head}, nil
}

// RestoreCheckpoint puts the workspace of user's chat (or client sandbox)
// back to checkpoint id, under the place's lease, after removing its kept
// container.
func (o *Orchestrator) RestoreCheckpoint(ctx context.Context, user, chat, sandbox, id string) (executor.RestoreInfo, error) {
	place, _, err := o.checkpointPlace(ctx, user, chat, sandbox)
	if err != nil {
		return executor.RestoreInfo{}, err
	}
	release, err := o.leases.Acquire(ctx, place.key(), executor.DefaultLeaseWait)
	if err != nil {
		return executor.RestoreInfo{}, checkpointError(err, id)
	}
	defer release()
	if e := o.pool.take(place); e != nil {
		o.removeWarm(e, "its workspace is restored to a checkpoint")
	}
	res, err := o.checkpoints.RestoreCheckpoint(ctx, place.user, place.chat, id)
	if err != nil {
		return res, checkpointError(err, id)
	}
	o.log.Info("workspace restored to a checkpoint", "user", user, "chat", chat, "sandbox", sandbox, "checkpoint", id, "written", res.Written, "removed", res.Removed)
	return res, nil
}

// ForkChat makes the workspace of user's new chat to start from
// checkpoint id of their chat from ("" for its newest), and returns the
// fork's first checkpoint. The new chat's first request starts a new agent
// session; its history, if it sends the one it forked, reaches the agent
// as its earlier turns.
func (o *Orchestrator) ForkChat(ctx context.Context, user, from, id, to string) (executor.CheckpointInfo, error) {
	src, _, err := o.checkpointPlace(ctx, user, from, "")
	if err != nil {
		return executor.CheckpointInfo{}, err
	}
	dst, _, err := o.checkpointPlace(ctx, user, to, "")
	if err != nil {
		return executor.CheckpointInfo{}, err
	}
	return o.fork(ctx, src, dst, id, o.opts.Checkpoints.Bounds)
}

// ForkSandbox makes count client sandboxes of user (1 to MaxForks; c
// configures them, its ID taken as the first one's and the others'
// suffixed -2, -3, ...; empty: generated) whose workspaces start from
// checkpoint id of their sandbox from ("" for its newest).
func (o *Orchestrator) ForkSandbox(ctx context.Context, user, from, id string, count int, c SandboxCreate) ([]ClientSandbox, error) {
	src, a, err := o.checkpointPlace(ctx, user, "", from)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > MaxForks {
		return nil, &Error{Kind: KindBadRequest, Param: "count", Message: fmt.Sprintf("count %d is out of range; fork 1 to %d sandboxes at once", count, MaxForks)}
	}
	c.Assistant = a.ID
	prewarm := c.Prewarm
	c.Prewarm = false // the fork fills the workspace first
	var made []ClientSandbox
	undo := func() {
		for _, sb := range made {
			_ = o.DeleteSandbox(context.WithoutCancel(ctx), user, sb.ID)
		}
	}
	base := c.ID
	for i := range count {
		ci := c
		if base != "" && i > 0 {
			ci.ID = fmt.Sprintf("%s-%d", base, i+1)
		}
		sb, err := o.CreateSandbox(ctx, user, ci)
		if err != nil {
			undo()
			return nil, err
		}
		made = append(made, sb)
		dst, _, err := o.checkpointPlace(ctx, user, "", sb.ID)
		if err == nil {
			_, err = o.fork(ctx, src, dst, id, a.Sandbox.Checkpoints.Bounds)
		}
		if err != nil {
			undo()
			return nil, err
		}
	}
	if prewarm {
		for i, sb := range made {
			s, a2, err := o.checkpointPlaceSandbox(ctx, user, sb.ID)
			if err == nil {
				err = o.prewarm(ctx, s, a2)
			}
			if err != nil {
				undo()
				return nil, err
			}
			made[i], _ = o.Sandbox(user, sb.ID)
		}
	}
	return made, nil
}

// checkpointPlaceSandbox is user's client sandbox id's record and its
// assistant.
func (o *Orchestrator) checkpointPlaceSandbox(ctx context.Context, user, id string) (*clientSandbox, *Assistant, error) {
	reg := o.sandboxes
	reg.mu.Lock()
	s := reg.byUser[user][id]
	reg.mu.Unlock()
	if s == nil {
		return nil, nil, errNoSandbox(id)
	}
	a, err := o.opts.Catalog.Lookup(ctx, s.Assistant)
	if err != nil {
		return nil, nil, Errorf(KindConfig, err, "the sandbox's assistant %q cannot be loaded; the gateway's log has the details", s.Assistant)
	}
	return s, a, nil
}

// fork makes dst's workspace checkpoint id of src ("" for src's newest),
// under both places' leases.
func (o *Orchestrator) fork(ctx context.Context, src, dst chatID, id string, b executor.CheckpointBounds) (executor.CheckpointInfo, error) {
	if src == dst {
		return executor.CheckpointInfo{}, &Error{Kind: KindBadRequest, Param: "chat", Message: "a fork needs a new chat; name one that is not the one forked"}
	}
	// Both leases in one order (by key), so that two forks between the
	// same places in opposite directions cannot wait on each other.
	keys := []string{src.key(), dst.key()}
	slices.Sort(keys)
	for _, k := range keys {
		release, err := o.leases.Acquire(ctx, k, executor.DefaultLeaseWait)
		if err != nil {
			return executor.CheckpointInfo{}, checkpointError(err, id)
		}
		defer release()
	}
	if id == "" {
		list, _, err := o.checkpoints.Checkpoints(ctx, src.user, src.chat)
		if err != nil || len(list) == 0 {
			return executor.CheckpointInfo{}, &Error{Kind: KindNotFound, Param: "checkpoint", Message: "there is no checkpoint to fork from yet; send a request first"}
		}
		id = list[len(list)-1].ID
	}
	info, err := o.checkpoints.ForkCheckpoint(ctx, src.user, src.chat, id, dst.user, dst.chat, b)
	if err != nil {
		return info, checkpointError(err, id)
	}
	o.log.Info("workspace forked from a checkpoint", "user", src.user, "from", src.chat, "to", dst.chat, "checkpoint", id)
	return info, nil
}
