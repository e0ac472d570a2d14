package docker

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
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
	disk     int64 // workspace quota in bytes
	inodes   int64 // workspace quota in files and directories
	deadline time.Time
	created  time.Time
}

var (
	userRe    = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
	runtimeRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	networkRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// newPlan validates spec against the baseline and fills in defaults. Every
// error wraps executor.ErrInvalid and names the field to fix.
func newPlan(spec executor.Spec, o Options, now time.Time) (plan, error) {
	p := plan{created: now}
	if err := executor.ValidateID("user id", spec.UserID); err != nil {
		return p, err
	}
	if err := executor.ValidateID("chat id", spec.ChatID); err != nil {
		return p, err
	}
	if spec.AssistantID != "" {
		if err := executor.ValidateID("assistant id", spec.AssistantID); err != nil {
			return p, err
		}
	}
	p.image = spec.Image
	if p.image == "" {
		p.image = o.Image
	}
	if p.image == "" {
		return p, fmt.Errorf("spec: Image is empty and Options.Image has no default; name a sandbox image: %w", executor.ErrInvalid)
	}
	if spec.MemoryBytes == 0 {
		spec.MemoryBytes = executor.DefaultMemoryBytes
	}
	if spec.MemoryBytes < 6<<20 {
		return p, fmt.Errorf("spec: MemoryBytes %d is below Docker's minimum of 6 MiB (negative means unlimited, which is not allowed): %w", spec.MemoryBytes, executor.ErrInvalid)
	}
	if spec.CPUs == 0 {
		spec.CPUs = executor.DefaultCPUs
	}
	if spec.CPUs < 0.01 || spec.CPUs > 1024 || math.IsNaN(spec.CPUs) {
		return p, fmt.Errorf("spec: CPUs %v is out of range; give a core count between 0.01 and 1024: %w", spec.CPUs, executor.ErrInvalid)
	}
	switch {
	case spec.PidsLimit == 0:
		spec.PidsLimit = executor.DefaultPidsLimit
	case spec.PidsLimit < 0:
		return p, fmt.Errorf("spec: PidsLimit %d would be unlimited; give a positive process cap such as %d: %w", spec.PidsLimit, executor.DefaultPidsLimit, executor.ErrInvalid)
	case spec.PidsLimit < 8:
		return p, fmt.Errorf("spec: PidsLimit %d leaves no room for init, the main process and a command; use at least 8: %w", spec.PidsLimit, executor.ErrInvalid)
	}
	if spec.Timeout == 0 {
		spec.Timeout = executor.DefaultTimeout
	}
	if spec.Timeout < time.Second {
		return p, fmt.Errorf("spec: Timeout %v is shorter than a second (negative is not unlimited): %w", spec.Timeout, executor.ErrInvalid)
	}
	if spec.Network == "" {
		spec.Network = "none"
	}
	if spec.Network == "host" || strings.Contains(spec.Network, ":") || !networkRe.MatchString(spec.Network) {
		return p, fmt.Errorf("spec: Network %q is not allowed; use \"none\" (the default) or a named Docker network, never host or container:<id>: %w", spec.Network, executor.ErrInvalid)
	}
	if spec.Runtime != "" && !runtimeRe.MatchString(spec.Runtime) {
		return p, fmt.Errorf("spec: Runtime %q is not a runtime name (e.g. runsc): %w", spec.Runtime, executor.ErrInvalid)
	}
	if spec.User == "" {
		spec.User = executor.DefaultUser
	}
	m := userRe.FindStringSubmatch(spec.User)
	if m == nil {
		return p, fmt.Errorf("spec: User %q is not numeric uid:gid (e.g. %q): %w", spec.User, executor.DefaultUser, executor.ErrInvalid)
	}
	var err error
	uid, err1 := strconv.Atoi(m[1])
	gid, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || uid > math.MaxInt32 || gid > math.MaxInt32 {
		return p, fmt.Errorf("spec: User %q is out of range: %w", spec.User, executor.ErrInvalid)
	}
	if uid == 0 || gid == 0 {
		return p, fmt.Errorf("spec: User %q is root; sandboxes run as a non-root user such as %q: %w", spec.User, executor.DefaultUser, executor.ErrInvalid)
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return p, fmt.Errorf("spec: Env entry %q is not KEY=VALUE: %w", kv, executor.ErrInvalid)
		}
	}
	if spec.LeaseWait < 0 {
		return p, fmt.Errorf("spec: LeaseWait %v is negative: %w", spec.LeaseWait, executor.ErrInvalid)
	}
	if spec.LeaseWait == 0 {
		spec.LeaseWait = o.DefaultLeaseWait
	}
	if err := checkEgress(spec, o); err != nil {
		return p, err
	}
	if p.disk, p.inodes, err = quotaLimits(spec); err != nil {
		return p, err
	}
	p.spec = spec
	p.uid, p.gid = uid, gid
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
