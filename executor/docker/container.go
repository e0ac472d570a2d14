package docker

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/agentbox/agentbox/executor"
)

// Labels in the reserved io.agentbox.* namespace on every container.
const (
	labelPrefix     = "io.agentbox."
	LabelManagedBy  = labelPrefix + "managed-by"
	LabelInstance   = labelPrefix + "instance"
	LabelDataDir    = labelPrefix + "data-dir"
	LabelSandbox    = labelPrefix + "sandbox"
	LabelUser       = labelPrefix + "user"
	LabelChat       = labelPrefix + "chat"
	LabelAssistant  = labelPrefix + "assistant"
	LabelConfigHash = labelPrefix + "config-hash"
	LabelCreatedAt  = labelPrefix + "created-at"
	LabelDeadline   = labelPrefix + "deadline"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "agentbox"
)

// plan is a validated Spec with every default filled in: what one
// container will be.
type plan struct {
	spec     executor.Spec
	image    string
	uid, gid int
	deadline time.Time
	created  time.Time
}

// newPlan is executor.Normalize with this executor's defaults (image,
// lease wait) and its own checks. Every error wraps executor.ErrInvalid
// and names the field to fix.
func newPlan(spec executor.Spec, o Options, now time.Time) (plan, error) {
	p := plan{created: now, image: cmp.Or(spec.Image, o.Image)}
	spec.LeaseWait = cmp.Or(spec.LeaseWait, o.DefaultLeaseWait)
	spec, err := executor.Normalize(spec)
	if p.image == "" {
		err = errors.Join(err, fmt.Errorf("spec: Image is empty and Options.Image has no default; name a sandbox image: %w", executor.ErrInvalid))
	}
	if err == nil {
		err = checkEgress(spec, o)
	}
	if err != nil {
		return p, err
	}
	p.spec = spec
	p.uid, p.gid, _ = executor.ParseUser(spec.User) // Normalize checked it
	p.deadline = now.Add(spec.Timeout)
	return p, nil
}

// labels are the io.agentbox.* labels of the container.
func (p plan) labels(o Options, sandboxID string) map[string]string {
	l := map[string]string{
		LabelManagedBy:  ManagedByValue,
		LabelInstance:   o.InstanceID,
		LabelDataDir:    o.DataDir,
		LabelSandbox:    sandboxID,
		LabelUser:       p.spec.UserID,
		LabelChat:       p.spec.ChatID,
		LabelAssistant:  p.spec.AssistantID,
		LabelConfigHash: p.spec.ConfigHash,
		LabelCreatedAt:  p.created.UTC().Format(time.RFC3339Nano),
		LabelDeadline:   p.deadline.UTC().Format(time.RFC3339Nano),
		LabelPolicy:     PolicyRequest,
	}
	if p.spec.IdleTTL > 0 {
		l[LabelPolicy], l[LabelIdleTTL] = PolicySession, p.spec.IdleTTL.String()
	}
	return l
}

// mainCommand is the container's main process: it lives until the deadline
// by itself, so the container ends (and AutoRemove deletes it) even when
// the gateway is gone.
func (p plan) mainCommand() []string {
	secs := int64(time.Until(p.deadline).Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	return []string{"sleep", strconv.FormatInt(secs, 10)}
}

// containerConfig builds the create request for p: the baseline of
// DESIGN.md, with the workspace at executor.ContainerWorkdir, the host dir
// at ContainerHostDir and the optional helper binary.
func (p plan) containerConfig(o Options, sandboxID, workspaceDir, hostDir string) (*container.Config, *container.HostConfig) {
	env := append(append([]string{"HOME=" + o.Home}, p.spec.Env...), p.egressEnv(o)...)
	cfg := &container.Config{
		Image:           p.image,
		User:            p.spec.User,
		Env:             env,
		Cmd:             p.mainCommand(),
		Entrypoint:      []string{},
		WorkingDir:      executor.ContainerWorkdir,
		Labels:          p.labels(o, sandboxID),
		NetworkDisabled: p.spec.Network == "none",
		StopSignal:      "SIGKILL",
	}
	init := true
	pids := p.spec.PidsLimit
	tmpfs := func(mode string) string {
		return fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=%s,uid=%d,gid=%d", o.TmpfsBytes, mode, p.uid, p.gid)
	}
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: workspaceDir, Target: executor.ContainerWorkdir,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}},
		{Type: mount.TypeBind, Source: hostDir, Target: ContainerHostDir,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}},
	}
	if o.HelperBinary != "" {
		// The helper is also the agent's tools CLI when called as abx.
		for _, target := range []string{ContainerHelperPath, ContainerToolsPath} {
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: o.HelperBinary, Target: target, ReadOnly: true,
				BindOptions: &mount.BindOptions{NonRecursive: true}})
		}
	}
	hc := &container.HostConfig{
		AutoRemove:     true,
		Init:           &init,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/tmp": tmpfs("1777"),
			o.Home: tmpfs("0700"),
		},
		Mounts:       mounts,
		MaskedPaths:  maskedPaths,
		NetworkMode:  container.NetworkMode(p.spec.Network),
		LogConfig:    container.LogConfig{Type: "none"},
		Runtime:      p.spec.Runtime,
		Privileged:   false,
		IpcMode:      "private",
		PidMode:      "",
		UTSMode:      "",
		UsernsMode:   "",
		CgroupnsMode: container.CgroupnsModePrivate,
		Resources: container.Resources{
			Memory:     p.spec.MemoryBytes,
			MemorySwap: p.spec.MemoryBytes,
			NanoCPUs:   int64(p.spec.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits:    []*container.Ulimit{{Name: "nofile", Soft: DefaultNofile, Hard: DefaultNofile}},
		},
	}
	return cfg, hc
}
