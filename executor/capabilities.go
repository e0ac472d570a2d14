package executor

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Capabilities is what a backend can honour, declared once by
// Executor.Capabilities (as Nomad's drivers declare theirs): the
// middleware refuses at start-up an assistant whose sandbox asks for more,
// naming the assistant, the option and the backend, and relies on the
// optional interfaces declared here without asking each sandbox per
// request (executortest.RunConformance holds a backend to them). The zero
// value honours nothing optional; a new ability (checkpoints) is a new
// field that the backends able to do it set.
type Capabilities struct {
	// Backend names the backend in messages: "docker", "local",
	// "kubernetes".
	Backend string
	// Pids: Spec.PidsLimit is enforced per sandbox. Without it only the
	// table's default passes (0 or DefaultPidsLimit: the configuration
	// applies the default, so a set value cannot be told from it), and
	// Why[KeyPids] says what bounds processes instead.
	Pids bool
	// Runtimes are the Spec.Runtime values it runs besides "" (its
	// default).
	Runtimes []string
	// Networks: Spec.Network may name a network besides "none".
	Networks bool
	// Quota is how a workspace's DiskBytes and Inodes are bounded.
	Quota QuotaKind
	// Keep: sandboxes implement Keeper, so the session policy (Spec.IdleTTL
	// > 0) and client sandboxes can keep them between requests.
	Keep bool
	// Egress: a Spec.Egress sandbox relays its proxy to the gateway's
	// egress proxy (its EgressProxyURL).
	Egress bool
	// ModelRelay: sandboxes implement ModelRelay with an address, the
	// helper relaying the agent's model traffic to a host socket.
	ModelRelay bool
	// HostListener: sandboxes have no HostDir; host sockets are reached
	// through HostListener.
	HostListener bool
	// Restore: sandboxes implement Restorer.
	Restore bool
	// Environment: the Executor implements EnvironmentProber.
	Environment bool
	// Checkpoints: the Executor implements Checkpointer.
	Checkpoints bool
	// Pool is how many started sandboxes are kept ahead per configuration
	// (0: none).
	Pool int
	// Why says, by option key (KeyPids, ...), why a setting is not
	// honoured and what to do instead, for the refusals' messages.
	Why map[string]string
}

// QuotaKind is how a backend bounds a workspace's DiskBytes and Inodes.
type QuotaKind string

// Quota kinds.
const (
	// QuotaFilesystem gives each workspace a filesystem of its own: the
	// kernel refuses writes past either bound (Docker's loop images).
	QuotaFilesystem QuotaKind = "filesystem"
	// QuotaWatchdog caps each file at DiskBytes and stops a sandbox whose
	// workspace it measured over either bound.
	QuotaWatchdog QuotaKind = "watchdog"
	// QuotaVolume leaves the total to the volume's own size; the number of
	// files is not bounded.
	QuotaVolume QuotaKind = "volume"
	// QuotaPerFile caps each file at DiskBytes; neither the total nor the
	// number of files is bounded.
	QuotaPerFile QuotaKind = "per-file"
)

// Check returns a refusal, wrapping ErrInvalid, for each setting of spec
// the backend cannot honour, each naming the option and the backend. Zero
// fields are defaults and always pass. The session policy is the
// middleware's to check (a backend only labels IdleTTL).
func (c Capabilities) Check(spec Spec) []error {
	var errs []error
	refuse := func(key, value, cannot, instead string) {
		if why := c.Why[key]; why != "" {
			cannot += " (" + why + ")"
		}
		errs = append(errs, fmt.Errorf("sandbox.%s%s: the %s backend %s; %s: %w", key, value, c.Backend, cannot, instead, ErrInvalid))
	}
	remove := func(key string) string { return "remove sandbox." + key }
	if !c.Pids && spec.PidsLimit != 0 && spec.PidsLimit != DefaultPidsLimit {
		refuse(KeyPids, fmt.Sprintf(" %d", spec.PidsLimit), "cannot limit processes per sandbox", remove(KeyPids))
	}
	if spec.Runtime != "" && !slices.Contains(c.Runtimes, spec.Runtime) {
		runs := "has no runtime to choose"
		if len(c.Runtimes) > 0 {
			runs = fmt.Sprintf("runs %q only", c.Runtimes)
		}
		refuse(KeyRuntime, fmt.Sprintf(" %q", spec.Runtime), runs, remove(KeyRuntime))
	}
	if !c.Networks && spec.Network != "" && spec.Network != DefaultNetwork {
		refuse(KeyNetwork, fmt.Sprintf(" %q", spec.Network), "gives sandboxes no network but loopback", remove(KeyNetwork))
	}
	if spec.Egress && !c.Egress {
		refuse(KeyEgress, "", "has no egress relay", remove(KeyEgress))
	}
	if c.Quota != QuotaFilesystem && c.Quota != QuotaWatchdog && spec.Inodes != 0 && spec.Inodes != DefaultInodesFor(cmp.Or(spec.DiskBytes, DefaultDiskBytes)) {
		refuse(KeyInodes, fmt.Sprintf(" %d", spec.Inodes), fmt.Sprintf("does not bound a workspace's number of files (its quota is %s)", c.Quota), remove(KeyInodes))
	}
	return errs
}

// Keeper is a sandbox that can be kept, idle, between requests
// (Capabilities.Keep): the session policy and client sandboxes.
type Keeper interface {
	// Park releases the chat and keeps the sandbox, idle.
	Park() error
	// Unpark takes the chat again and checks the sandbox still runs.
	Unpark(ctx context.Context, wait time.Duration) error
}

// ModelRelay is a sandbox with the helper's model relay
// (Capabilities.ModelRelay): where the agent reaches the model.
type ModelRelay interface {
	ModelBaseURL() string
}
