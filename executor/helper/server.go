package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// DefaultKillGrace is how long a cancelled or timed-out command's process
// group has between SIGTERM and SIGKILL.
const DefaultKillGrace = 500 * time.Millisecond

// drainWait bounds how long output is still read after a command's process
// group was killed (a process that left the group may hold the pipes).
const drainWait = 2 * time.Second

// ServerOptions configure the in-container side.
type ServerOptions struct {
	// Dir is the per-sandbox directory (ContainerDir in a container).
	Dir string
	// Workdir is the working directory of commands that name none.
	Workdir string
	// ModelPort, when > 0, is the loopback TCP port relayed to
	// Dir/model.sock.
	ModelPort int
	// EgressPort, when > 0, is the loopback TCP port relayed to
	// Dir/egress.sock, the host's egress proxy (HTTP_PROXY).
	EgressPort int
	// Deadline, when set, is the dead-man switch: at it every command's
	// process group is killed and Run returns ErrDeadline, whether or not
	// the host is still there.
	Deadline time.Time
	// KillGrace is the SIGTERM→SIGKILL delay (DefaultKillGrace when 0).
	KillGrace time.Duration
	// ExecPort, when > 0, also serves the exec and file protocol on the
	// loopback TCP port, for hosts that reach the sandbox through a port
	// forward (Kubernetes) rather than a shared directory. It gives nothing
	// the sandbox's own processes do not already have: they run as the
	// helper's user.
	ExecPort int
	// Reverse makes the relays use connections the host parked on the exec
	// port (ListenReverse) instead of dialling host sockets in Dir, and
	// makes the helper listen on Dir/mcp.sock itself: for hosts that share
	// no directory with the sandbox. It needs ExecPort.
	Reverse bool
	// MaxFileSize caps the file service's reads and writes
	// (executor.DefaultMaxFileSize when 0).
	MaxFileSize int64
	// Logger receives diagnostics (discarded when nil).
	Logger *slog.Logger
}

// ErrDeadline is returned by Server.Run when the sandbox deadline passed.
var ErrDeadline = errors.New("helper: sandbox deadline reached")

// Server is the helper's in-container side: the exec service on
// Dir/exec.sock, the model forwarder and the dead-man switch.
type Server struct {
	opts ServerOptions
	log  *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc
	done  bool
	ws    *executor.Workspace // the file service's, opened on first use

	parking *parking // Reverse: parked host connections
}

// NewServer returns a server; Run starts it.
func NewServer(o ServerOptions) *Server {
	if o.Dir == "" {
		o.Dir = ContainerDir
	}
	if o.Workdir == "" {
		o.Workdir = "/workspace"
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = executor.DefaultMaxFileSize
	}
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: o, log: lg, procs: map[string]*proc{}, parking: newParking()}
}

// Run serves until ctx ends or the deadline passes, then kills every
// running command's process group. It returns ErrDeadline at the deadline,
// nil when ctx ended, or the listener's error.
func (s *Server) Run(ctx context.Context) error {
	if !s.opts.Deadline.IsZero() && !time.Now().Before(s.opts.Deadline) {
		return fmt.Errorf("%w before start (deadline %s)", ErrDeadline, s.opts.Deadline.Format(time.RFC3339))
	}
	sock := SocketPath(s.opts.Dir, ExecSocket)
	// A socket file left by an earlier container in the same directory.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("helper: remove stale %s: %w", sock, err)
	}
	ln, err := listenSock(ctx, s.opts.Dir, ExecSocket, 0)
	if err != nil {
		return fmt.Errorf("helper: listen on %s: %w; is the per-sandbox directory mounted writable at %s?", sock, err, s.opts.Dir)
	}
	var mln, eln, xln, cln net.Listener
	if s.opts.Reverse && s.opts.ExecPort <= 0 {
		_ = ln.Close()
		return fmt.Errorf("helper: --reverse needs --exec-port, where the host parks its connections")
	}
	if s.opts.Reverse {
		// mcp.sock is ours in reverse mode; a stale one from an earlier
		// helper in the same directory goes first.
		_ = os.Remove(SocketPath(s.opts.Dir, MCPSocket))
		cln, err = listenSock(ctx, s.opts.Dir, MCPSocket, 0)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("helper: reverse mcp socket: %w", err)
		}
	}
	if s.opts.ExecPort > 0 {
		var lc net.ListenConfig
		xln, err = lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.ExecPort)))
		if err != nil {
			closeListeners(ln, cln)
			return fmt.Errorf("helper: exec port: %w; pick another --exec-port", err)
		}
	}
	if s.opts.ModelPort > 0 {
		var lc net.ListenConfig
		mln, err = lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.ModelPort)))
		if err != nil {
			closeListeners(ln, xln, cln)
			return fmt.Errorf("helper: model forwarder: %w; pick another --model-port", err)
		}
	}
	if s.opts.EgressPort > 0 {
		var lc net.ListenConfig
		eln, err = lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.EgressPort)))
		if err != nil {
			closeListeners(ln, xln, cln, mln)
			return fmt.Errorf("helper: egress forwarder: %w; pick another --egress-port", err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	deadlineHit := make(chan struct{})
	if !s.opts.Deadline.IsZero() {
		t := time.AfterFunc(time.Until(s.opts.Deadline), func() { close(deadlineHit); stop() })
		defer t.Stop()
	}

	var wg sync.WaitGroup
	errc := make(chan error, 5)
	wg.Go(func() { errc <- s.acceptExec(ln) })
	if xln != nil {
		wg.Go(func() { errc <- s.acceptExec(xln) })
	}
	if cln != nil {
		wg.Go(func() { errc <- s.acceptRelay(cln, MCPSocket) })
	}
	if mln != nil {
		wg.Go(func() { errc <- s.acceptRelay(mln, ModelSocket) })
	}
	if eln != nil {
		wg.Go(func() { errc <- s.acceptRelay(eln, EgressSocket) })
	}
	select {
	case <-runCtx.Done():
		err = nil
	case err = <-errc:
	}
	closeListeners(ln, xln, cln, mln, eln)
	s.parking.closeAll()
	s.killAll()
	s.mu.Lock()
	if s.ws != nil {
		_ = s.ws.Close()
	}
	s.mu.Unlock()
	select {
	case <-deadlineHit:
		s.log.Info("deadline reached; commands killed", "deadline", s.opts.Deadline)
		return ErrDeadline
	default:
	}
	return err
}

// closeListeners closes the listeners that are not nil.
func closeListeners(lns ...net.Listener) {
	for _, l := range lns {
		if l != nil {
			_ = l.Close()
		}
	}
}

// killAll kills every running command's process group at once (no grace:
// the sandbox is ending).
func (s *Server) killAll() {
	s.mu.Lock()
	s.done = true
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.setReason(failDeadline)
		p.signalGroup(syscall.SIGKILL)
	}
}

func (s *Server) acceptExec(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("helper: accept on exec socket: %w", err)
		}
		go s.serveConn(c)
	}
}

// serveConn handles one host connection; its first frame picks the exchange.
func (s *Server) serveConn(c net.Conn) {
	keep := false // a parked connection outlives this call
	defer func() {
		if !keep {
			_ = c.Close()
		}
	}()
	fr := &frameReader{r: bufio.NewReaderSize(c, 4096)} // large payloads bypass the buffer
	handedOff := false                                  // a command's reader goroutine releases fr
	defer func() {
		if !handedOff {
			fr.release()
		}
	}()
	typ, p, err := fr.next()
	if err != nil {
		s.log.Debug("exec connection without a first frame", "err", err)
		return
	}
	switch typ {
	case frameHello:
		b, _ := json.Marshal(hello{Version: ProtocolVersion, PID: os.Getpid(), KillGraceMS: s.opts.KillGrace.Milliseconds()})
		_ = writeFrame(c, frameHello, b)
	case frameKill:
		var k killRequest
		if json.Unmarshal(p, &k) == nil {
			s.mu.Lock()
			pr := s.procs[k.ID]
			s.mu.Unlock()
			if pr != nil {
				pr.kill(failCanceled)
			}
		}
		_ = writeFrame(c, frameKill, nil)
	case frameRequest:
		var req execRequest
		if err := json.Unmarshal(p, &req); err != nil {
			s.sendExit(c, exitStatus{ExitCode: -1, Error: failInvalid, Message: "malformed request: " + err.Error()})
			return
		}
		handedOff = s.runCommand(c, fr, &req)
	case frameFS:
		s.serveFS(c, fr, p)
	case framePark:
		var req parkRequest
		if !s.opts.Reverse || json.Unmarshal(p, &req) != nil {
			s.log.Debug("park refused", "reverse", s.opts.Reverse)
			return
		}
		// What the host sends after the go frame may already sit in
		// the reader's buffer.
		if s.parking.park(req.Name, &bufferedConn{Conn: c, r: fr.r.(*bufio.Reader)}) {
			keep = true
		}
	default:
		s.log.Debug("unknown first frame", "type", string(typ))
	}
}

func (s *Server) sendExit(w io.Writer, st exitStatus) {
	b, _ := json.Marshal(st)
	_ = writeFrame(w, frameExit, b)
}

// proc is one running command.
type proc struct {
	pgid   int
	grace  time.Duration
	marker []byte // ExecIDEnv=id

	once   sync.Once
	reason string // set once by kill
	mu     sync.Mutex
}

// signalGroup sends sig to the command's whole process group.
func (p *proc) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-p.pgid, sig)
}

// kill ends the process group: SIGTERM, then SIGKILL after the grace. The
// first reason wins.
func (p *proc) kill(reason string) {
	p.once.Do(func() {
		p.setReason(reason)
		p.signalGroup(syscall.SIGTERM)
		sweep(p.marker, syscall.SIGTERM)
		time.AfterFunc(p.grace, func() {
			p.signalGroup(syscall.SIGKILL)
			sweep(p.marker, syscall.SIGKILL)
		})
	})
}

// ExecIDEnv names the variable every command (and so every process it
// starts, unless it scrubs its environment) carries with its command id;
// killing a command also kills the processes that left its process group
// (setsid) but still carry the id.
const ExecIDEnv = "AGENTBOX_EXEC_ID"

// sweep sends sig to every process, other than the helper, whose
// environment holds marker. It reads /proc; processes of other users are
// unreadable and skipped (the helper's commands run as its own user).
func sweep(marker []byte, sig syscall.Signal) {
	if len(marker) == 0 {
		return
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(kv, marker) {
				_ = syscall.Kill(pid, sig)
				break
			}
		}
	}
}

// setReason records why the command is being killed, unless a reason is
// already known.
func (p *proc) setReason(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reason == "" {
		p.reason = reason
	}
}

func (p *proc) killReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason
}

// runCommand starts req in its own process group and streams it over c.
// It reports whether it handed fr to a reader goroutine (which then
// releases it).
func (s *Server) runCommand(c net.Conn, fr *frameReader, req *execRequest) bool {
	start := time.Now()
	fail := func(kind, msg string) {
		s.sendExit(c, exitStatus{ExitCode: -1, Error: kind, Message: msg, DurationNS: int64(time.Since(start))})
	}
	if len(req.Args) == 0 || req.ID == "" {
		fail(failInvalid, "request needs an id and a non-empty args")
		return false
	}
	dir := req.Dir
	if dir == "" {
		dir = s.opts.Workdir
	}
	cmd := exec.Command(req.Args[0], req.Args[1:]...)
	if p, ok := envPath(req.Env); ok && !strings.Contains(req.Args[0], "/") {
		// The command's own PATH decides, as it would in a shell.
		cmd.Path, cmd.Err = lookPath(req.Args[0], p)
	}
	marker := ExecIDEnv + "=" + req.ID
	cmd.Env = append(append(os.Environ(), req.Env...), marker)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	outR, outW, err := os.Pipe()
	if err != nil {
		fail(failStart, err.Error())
		return false
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		fail(failStart, err.Error())
		return false
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	var inR, inW *os.File
	if req.Stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			fail(failStart, err.Error())
			return false
		}
		cmd.Stdin = inR
	}

	oom0 := oomKills()
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		closeAll(outR, outW, errR, errW, inR, inW)
		fail(failDeadline, "the helper is shutting down")
		return false
	}
	if _, dup := s.procs[req.ID]; dup {
		s.mu.Unlock()
		closeAll(outR, outW, errR, errW, inR, inW)
		fail(failInvalid, "duplicate command id "+req.ID)
		return false
	}
	err = cmd.Start()
	if err != nil {
		s.mu.Unlock()
		closeAll(outR, outW, errR, errW, inR, inW)
		kind := failStart
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			kind = failNotFound
		}
		fail(kind, err.Error())
		return false
	}
	p := &proc{pgid: cmd.Process.Pid, grace: s.opts.KillGrace, marker: []byte(marker)}
	s.procs[req.ID] = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.procs, req.ID)
		s.mu.Unlock()
	}()
	closeAll(outW, errW, inR)

	if req.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() { p.kill(failTimeout) })
		defer t.Stop()
	}

	exited := make(chan struct{})
	var wmu sync.Mutex // frames from the two pumps interleave whole
	var pumps sync.WaitGroup
	pump := func(r *os.File, typ byte) {
		defer func() { _ = r.Close() }()
		bp := getChunk()
		defer putChunk(bp)
		buf := *bp
		var total int64
		hostGone := false
		for {
			n, rerr := r.Read(buf[headerSize:])
			if n > 0 && !hostGone {
				if req.MaxOutput > 0 && total+int64(n) > req.MaxOutput {
					n = int(req.MaxOutput - total)
					p.kill(failOutput)
				}
				total += int64(n)
				if n > 0 {
					wmu.Lock()
					werr := writeDataFrame(c, typ, buf, n)
					wmu.Unlock()
					if werr != nil {
						hostGone = true
						p.kill(failCanceled)
					}
				}
			}
			if rerr != nil {
				return
			}
		}
	}
	pumps.Go(func() { pump(outR, frameStdout) })
	pumps.Go(func() { pump(errR, frameStderr) })

	// Host frames: stdin, or the connection closing (the host gave up).
	var stdin chan []byte
	if inW != nil {
		stdin = make(chan []byte, 8)
		go func() {
			defer func() { _ = inW.Close() }()
			broken := false
			for b := range stdin {
				if !broken {
					if _, err := inW.Write(b); err != nil {
						broken = true // EPIPE: the command closed its stdin
					}
				}
			}
		}()
	}
	go func() {
		defer fr.release()
		stdinOpen := stdin != nil
		defer func() {
			if stdinOpen {
				close(stdin)
			}
		}()
		for {
			typ, b, err := fr.next()
			if err != nil {
				select {
				case <-exited:
				default:
					p.kill(failCanceled)
				}
				return
			}
			switch typ {
			case frameStdin:
				if stdinOpen {
					cp := append([]byte(nil), b...)
					select {
					case stdin <- cp:
					case <-exited:
					}
				}
			case frameStdinEOF:
				if stdinOpen {
					close(stdin)
					stdinOpen = false
				}
			}
		}
	}()

	waitErr := cmd.Wait()
	close(exited)
	// Whatever the command left running in its group does not outlive it;
	// a killed command's escapees (setsid) are swept once more.
	p.signalGroup(syscall.SIGKILL)
	if p.killReason() != "" {
		sweep(p.marker, syscall.SIGKILL)
	}
	dl := time.Now().Add(drainWait)
	_ = outR.SetReadDeadline(dl)
	_ = errR.SetReadDeadline(dl)
	pumps.Wait()

	st := exitStatus{DurationNS: int64(time.Since(start)), ExitCode: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.ExitCode = -1
		st.Signal = signalName(ws.Signal())
	} else if waitErr != nil && st.ExitCode == 0 {
		st.ExitCode = -1
		st.Message = waitErr.Error()
	}
	if reason := p.killReason(); reason != "" {
		st.Error = reason
	}
	st.OOMKilled = oomKills() > oom0
	wmu.Lock()
	s.sendExit(c, st)
	wmu.Unlock()
	return true
}

// envPath returns the last PATH set in env.
func envPath(env []string) (string, bool) {
	path, ok := "", false
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			path, ok = v, true
		}
	}
	return path, ok
}

// lookPath finds an executable name in the directories of path.
func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		f := filepath.Join(dir, name)
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return f, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// signalName gives the conventional name of the signals a command usually
// dies of.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	}
	return "signal " + strconv.Itoa(int(sig))
}

// oomFiles are the cgroup files holding the oom_kill counter: v2, then v1.
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomFile is the first of oomFiles that was readable ("" until found).
var oomFile atomic.Value

// oomKills reads the container cgroup's oom_kill counter, or 0 when no
// counter is readable.
func oomKills() int64 {
	files := oomFiles
	if f, _ := oomFile.Load().(string); f != "" {
		files = []string{f}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		oomFile.Store(f)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}
