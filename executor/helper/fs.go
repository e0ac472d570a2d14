package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// The workspace file service: the executor.FS of the helper's Workdir,
// served on the exec connection for backends whose workspace is not a host
// directory (Kubernetes pods reach the helper through port-forward). The
// helper opens Workdir as an executor.Workspace, so the guarantees are the
// host-side API's: no symbolic link is followed, FIFOs, sockets and devices
// are refused, sizes and entry counts are capped.
//
// One connection carries one operation. The host sends a frameFS with a
// JSON fsRequest; for write and restore the content follows in frameStdin
// frames and a frameStdinEOF. The helper answers with the result in
// frameStdout frames (the file's bytes for read, JSON for list, stat and
// edit) and a last frameFS with a JSON fsStatus.

// frameFS opens a file operation (host→helper) and closes it (helper→host).
const frameFS byte = 'F'

// File operations of fsRequest.Op.
const (
	fsRead    = "read"
	fsWrite   = "write"
	fsRestore = "restore"
	fsList    = "list"
	fsStat    = "stat"
	fsEdit    = "edit"
	// fsToken writes Dir/token, the per-request token `agentbox-helper mcp`
	// presents, for a host that cannot write the helper's directory.
	fsToken = "token"
	// fsQuota measures the workspace against a disk and inode quota
	// (executor.CheckQuota) for a host that cannot walk it itself.
	fsQuota = "quota"
)

// Failure kinds of fsStatus.Error, mapped to the executor's sentinels.
const (
	fsErrNotFound = "not_found"
	fsErrEscapes  = "escapes"
	fsErrTooLarge = "too_large"
	fsErrInvalid  = "invalid"
	fsErrNoSpace  = "no_space"
	fsErrEdit     = "edit"
	fsErrOther    = "error"
)

// fsRequest is one file operation.
type fsRequest struct {
	Op    string          `json:"op"`
	Name  string          `json:"name"`
	Edits []executor.Edit `json:"edits,omitempty"`
	// DiskBytes and Inodes are fsQuota's limits.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	Inodes    int64 `json:"inodes,omitempty"`
}

// fsStatus ends a file operation.
type fsStatus struct {
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	// EditIndex and EditMode carry an executor.EditError.
	EditIndex int    `json:"edit_index,omitempty"`
	EditMode  string `json:"edit_mode,omitempty"`
}

// workspace opens the helper's Workdir as a Workspace on first use; a
// failed open is retried by the next operation.
func (s *Server) workspace() (*executor.Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ws != nil {
		return s.ws, nil
	}
	// The helper runs as the sandbox user: what it creates is that user's.
	ws, err := executor.OpenWorkspace(s.opts.Workdir, executor.WorkspaceOptions{UID: -1, GID: -1, MaxFileSize: s.opts.MaxFileSize})
	if err != nil {
		return nil, err
	}
	s.ws = ws
	return ws, nil
}

// serveFS runs one file operation on c; fr has read the request frame.
func (s *Server) serveFS(c net.Conn, fr *frameReader, p []byte) {
	var req fsRequest
	if err := json.Unmarshal(p, &req); err != nil {
		s.sendFSStatus(c, fsStatus{Error: fsErrInvalid, Message: "malformed file request: " + err.Error()})
		return
	}
	ws, err := s.workspace()
	if err != nil {
		s.sendFSStatus(c, statusOf(err))
		return
	}
	// A host that went away must not hold the operation forever.
	ctx, cancel := context.WithTimeout(context.Background(), fsTimeout)
	defer cancel()
	var out []byte
	switch req.Op {
	case fsRead:
		out, err = ws.ReadFile(ctx, req.Name)
	case fsWrite, fsRestore, fsToken:
		var data []byte
		data, err = readUpload(fr, s.opts.MaxFileSize)
		switch {
		case err != nil:
		case req.Op == fsWrite:
			err = ws.WriteFile(ctx, req.Name, data)
		case req.Op == fsRestore:
			err = ws.RestoreFile(ctx, req.Name, data)
		default:
			err = s.writeToken(data)
		}
	case fsList:
		var list []executor.FileInfo
		if list, err = ws.ListDir(ctx, req.Name); err == nil {
			out, err = json.Marshal(list)
		}
	case fsStat:
		var fi executor.FileInfo
		if fi, err = ws.Stat(ctx, req.Name); err == nil {
			out, err = json.Marshal(fi)
		}
	case fsEdit:
		var res executor.EditResult
		if res, err = ws.EditFile(ctx, req.Name, req.Edits); err == nil {
			out, err = json.Marshal(res)
		}
	case fsQuota:
		if req.DiskBytes <= 0 || req.Inodes <= 0 {
			err = fmt.Errorf("a quota needs disk_bytes and inodes above 0: %w", executor.ErrInvalid)
		} else {
			err = executor.CheckQuota(s.opts.Workdir, req.DiskBytes, req.Inodes)
		}
	default:
		err = fmt.Errorf("unknown file operation %q: %w", req.Op, executor.ErrInvalid)
	}
	if err != nil {
		s.sendFSStatus(c, statusOf(err))
		return
	}
	w := bufio.NewWriterSize(c, headerSize+chunkSize)
	for len(out) > 0 {
		n := min(len(out), chunkSize)
		if writeFrame(w, frameStdout, out[:n]) != nil {
			return
		}
		out = out[n:]
	}
	s.sendFSStatus(w, fsStatus{})
	_ = w.Flush()
}

// writeToken replaces Dir/token (mode 0400) with data.
func (s *Server) writeToken(data []byte) error {
	if len(data) == 0 || len(data) > 4096 || bytes.ContainsAny(data, "\x00\n") {
		return fmt.Errorf("a token is 1 to 4096 bytes on one line: %w", executor.ErrInvalid)
	}
	path := filepath.Join(s.opts.Dir, TokenFile)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, append(data, '\n'), 0o400); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WriteToken gives the helper the per-request token that `agentbox-helper
// mcp` presents (Dir/token), for hosts that share no directory with it.
func (c *Client) WriteToken(ctx context.Context, token string) error {
	_, err := c.fileOp(ctx, fsRequest{Op: fsToken}, []byte(token))
	return err
}

// fsTimeout bounds one file operation in the helper.
const fsTimeout = time.Minute

func (s *Server) sendFSStatus(w io.Writer, st fsStatus) {
	b, _ := json.Marshal(st)
	_ = writeFrame(w, frameFS, b)
}

// readUpload reads the content of a write: data frames up to a
// frameStdinEOF, at most limit bytes.
func readUpload(fr *frameReader, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	for {
		typ, p, err := fr.next()
		if err != nil {
			return nil, fmt.Errorf("read the file's content: %w", err)
		}
		switch typ {
		case frameStdin:
			if int64(buf.Len()+len(p)) > limit {
				return nil, fmt.Errorf("content is over the %d-byte cap; write less or raise the file size cap: %w", limit, executor.ErrOutputTooLarge)
			}
			buf.Write(p)
		case frameStdinEOF:
			return buf.Bytes(), nil
		default:
			return nil, fmt.Errorf("unexpected frame %q in a file's content: %w", typ, executor.ErrInvalid)
		}
	}
}

// statusOf turns a Workspace error into its wire form.
func statusOf(err error) fsStatus {
	st := fsStatus{Message: err.Error()}
	var ee *executor.EditError
	switch {
	case errors.As(err, &ee):
		st.Error, st.EditIndex, st.EditMode, st.Message = fsErrEdit, ee.Index, ee.Mode, ee.Reason
	case errors.Is(err, executor.ErrNotFound):
		st.Error = fsErrNotFound
	case errors.Is(err, executor.ErrPathEscapes):
		st.Error = fsErrEscapes
	case errors.Is(err, executor.ErrOutputTooLarge):
		st.Error = fsErrTooLarge
	case errors.Is(err, executor.ErrInvalid):
		st.Error = fsErrInvalid
	case errors.Is(err, executor.ErrNoSpace), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		st.Error = fsErrNoSpace
	default:
		st.Error = fsErrOther
	}
	return st
}

// asError turns a helper's fsStatus back into an error that wraps the
// executor's sentinel for its kind.
func (st fsStatus) asError(op, name string) error {
	var sentinel error
	switch st.Error {
	case "":
		return nil
	case fsErrEdit:
		return fmt.Errorf("helper: %s %s: %w", op, name, &executor.EditError{Index: st.EditIndex, Mode: st.EditMode, Reason: st.Message})
	case fsErrNotFound:
		sentinel = executor.ErrNotFound
	case fsErrEscapes:
		sentinel = executor.ErrPathEscapes
	case fsErrTooLarge:
		sentinel = executor.ErrOutputTooLarge
	case fsErrInvalid:
		sentinel = executor.ErrInvalid
	case fsErrNoSpace:
		sentinel = executor.ErrNoSpace
	default:
		return fmt.Errorf("helper: %s %s: %s", op, name, st.Message)
	}
	// The helper's message ends with the sentinel's text already.
	msg := strings.TrimSuffix(st.Message, ": "+sentinel.Error())
	return fmt.Errorf("helper: %s: %s: %w", op, msg, sentinel)
}

// maxFSResult caps what the host reads back from one file operation: a
// helper (which the sandbox's processes can replace) cannot make the host
// buffer more than this.
const maxFSResult = executor.DefaultMaxFileSize + 4<<20

var _ executor.FS = (*Client)(nil)
var _ executor.Restorer = (*Client)(nil)

// ReadFile reads a workspace file through the helper's file service.
func (c *Client) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return c.fileOp(ctx, fsRequest{Op: fsRead, Name: name}, nil)
}

// WriteFile writes a workspace file through the helper's file service.
func (c *Client) WriteFile(ctx context.Context, name string, data []byte) error {
	_, err := c.fileOp(ctx, fsRequest{Op: fsWrite, Name: name}, data)
	return err
}

// RestoreFile restores a host-owned workspace file through the helper (see
// executor.Workspace.RestoreFile).
func (c *Client) RestoreFile(ctx context.Context, name string, data []byte) error {
	_, err := c.fileOp(ctx, fsRequest{Op: fsRestore, Name: name}, data)
	return err
}

// ListDir lists a workspace directory through the helper's file service.
func (c *Client) ListDir(ctx context.Context, name string) ([]executor.FileInfo, error) {
	b, err := c.fileOp(ctx, fsRequest{Op: fsList, Name: name}, nil)
	if err != nil {
		return nil, err
	}
	var list []executor.FileInfo
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("helper: list %s: malformed answer: %w", name, err)
	}
	return list, nil
}

// Stat describes a workspace entry through the helper's file service.
func (c *Client) Stat(ctx context.Context, name string) (executor.FileInfo, error) {
	var fi executor.FileInfo
	b, err := c.fileOp(ctx, fsRequest{Op: fsStat, Name: name}, nil)
	if err != nil {
		return fi, err
	}
	if err := json.Unmarshal(b, &fi); err != nil {
		return fi, fmt.Errorf("helper: stat %s: malformed answer: %w", name, err)
	}
	return fi, nil
}

// EditFile edits a workspace file through the helper's file service.
func (c *Client) EditFile(ctx context.Context, name string, edits []executor.Edit) (executor.EditResult, error) {
	var res executor.EditResult
	b, err := c.fileOp(ctx, fsRequest{Op: fsEdit, Name: name, Edits: edits}, nil)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("helper: edit %s: malformed answer: %w", name, err)
	}
	return res, nil
}

// CheckQuota measures the helper's workspace (executor.CheckQuota): an
// error wrapping executor.ErrNoSpace says it holds more than disk bytes or
// inodes entries.
func (c *Client) CheckQuota(ctx context.Context, disk, inodes int64) error {
	_, err := c.fileOp(ctx, fsRequest{Op: fsQuota, DiskBytes: disk, Inodes: inodes}, nil)
	return err
}

// fileOp runs one file operation: the request, upload's bytes when it is
// a write, and the answer's bytes.
func (c *Client) fileOp(ctx context.Context, req fsRequest, upload []byte) ([]byte, error) {
	b, _ := json.Marshal(req)
	if len(b) > MaxFrame {
		return nil, fmt.Errorf("helper: %s %s: the request takes %d bytes, over the %d cap: %w", req.Op, req.Name, len(b), MaxFrame, executor.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("helper: %s %s: %w", req.Op, req.Name, err)
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.release(conn)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	deadline := time.Now().Add(fsTimeout + hostGrace)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	fail := func(step string, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("helper: %s %s: %w", req.Op, req.Name, ctx.Err())
		}
		return fmt.Errorf("helper: %s %s: %s: %w (%w)", req.Op, req.Name, step, executor.ErrNotRunning, err)
	}
	w := bufio.NewWriterSize(conn, headerSize+chunkSize)
	if err := writeFrame(w, frameFS, b); err != nil {
		return nil, fail("send", err)
	}
	if req.Op == fsWrite || req.Op == fsRestore || req.Op == fsToken {
		for rest := upload; len(rest) > 0; {
			n := min(len(rest), chunkSize)
			if err := writeFrame(w, frameStdin, rest[:n]); err != nil {
				return nil, fail("send", err)
			}
			rest = rest[n:]
		}
		if err := writeFrame(w, frameStdinEOF, nil); err != nil {
			return nil, fail("send", err)
		}
	}
	if err := w.Flush(); err != nil {
		return nil, fail("send", err)
	}
	fr := &frameReader{r: bufio.NewReaderSize(conn, 4096)}
	defer fr.release()
	var out bytes.Buffer
	for {
		typ, p, err := fr.next()
		if err != nil {
			return nil, fail("read the answer", err)
		}
		switch typ {
		case frameStdout:
			if out.Len()+len(p) > maxFSResult {
				return nil, fmt.Errorf("helper: %s %s: the answer is over %d bytes: %w", req.Op, req.Name, maxFSResult, executor.ErrOutputTooLarge)
			}
			out.Write(p)
		case frameFS:
			var st fsStatus
			if err := json.Unmarshal(p, &st); err != nil {
				return nil, fmt.Errorf("helper: %s %s: malformed status: %w", req.Op, req.Name, err)
			}
			if err := st.asError(req.Op, req.Name); err != nil {
				return nil, err
			}
			return out.Bytes(), nil
		default:
			return nil, fmt.Errorf("helper: %s %s: unexpected frame %q", req.Op, req.Name, typ)
		}
	}
}
