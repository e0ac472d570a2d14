package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the line cap used when NewReader is given 0: Claude Code
// writes whole tool results and file contents into single lines, which can
// be megabytes long.
const DefaultMaxLine = 64 << 20

// readBufferSize is the bufio buffer under the Reader; lines longer than it
// are assembled in a growing buffer.
const readBufferSize = 64 << 10

// keepBuffer is the largest assembly buffer kept after a short line; a
// bigger one (left by a huge line) is released so one long line does not pin
// its memory for the rest of the stream.
const keepBuffer = 1 << 20

// ErrLineTooLong is matched (errors.Is) by the *LineTooLongError a Reader
// returns for a line longer than its cap.
var ErrLineTooLong = errors.New("jsonl: line too long")

// LineTooLongError reports a line longer than the Reader's cap. The line is
// skipped: the next ReadLine continues after its newline.
type LineTooLongError struct {
	// Line is the 1-based number of the offending line.
	Line int
	// Limit is the cap in bytes.
	Limit int
	// Prefix is the start of the line, for diagnostics.
	Prefix []byte
}

// Error implements error.
func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("jsonl: line %d is longer than %d bytes (starts %q); raise the line cap if such output is expected",
		e.Line, e.Limit, e.Prefix)
}

// Is makes errors.Is(err, ErrLineTooLong) true.
func (e *LineTooLongError) Is(target error) bool { return target == ErrLineTooLong }

// prefixLen is how much of a too-long line LineTooLongError keeps.
const prefixLen = 80

// Reader reads lines of at most a fixed number of bytes. Unlike
// bufio.Scanner it never ends a stream silently at a long line: such a line
// yields a *LineTooLongError and reading can go on with the next line.
type Reader struct {
	br      *bufio.Reader
	max     int
	buf     []byte
	line    int
	discard bool // the rest of a too-long line is still unread
}

// NewReader returns a Reader over r whose lines may be at most max bytes
// (without the newline); max <= 0 means DefaultMaxLine.
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &Reader{br: bufio.NewReaderSize(r, readBufferSize), max: max}
}

// Line returns the number of lines read so far (1-based number of the last
// line returned or rejected).
func (r *Reader) Line() int { return r.line }

// ReadLine returns the next line without its "\n" (and without a "\r"
// before it). The slice is valid until the next call. A last line without a
// newline is returned as a line; after it ReadLine returns io.EOF. A line
// longer than the cap returns a *LineTooLongError, other read errors are
// returned as they are.
func (r *Reader) ReadLine() ([]byte, error) {
	if r.discard {
		if err := r.skipLine(); err != nil {
			return nil, err
		}
	}
	if cap(r.buf) > keepBuffer && len(r.buf) <= keepBuffer/4 {
		// The last line was small: the big buffer a long line left is
		// not needed any more. Runs of long lines keep reusing it.
		r.buf = nil
	}
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		complete := err == nil
		n := len(r.buf) + len(chunk)
		if complete {
			n-- // the newline does not count against the cap
		}
		if n > r.max {
			return nil, r.tooLong(chunk, errors.Is(err, bufio.ErrBufferFull))
		}
		r.grow(len(chunk))
		r.buf = append(r.buf, chunk...)
		switch {
		case complete:
			r.line++
			return trimEOL(r.buf), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.buf) > 0:
			r.line++
			return trimEOL(r.buf), nil
		default:
			return nil, err
		}
	}
}

// grow makes room for n more bytes, doubling the buffer (append alone grows
// large slices by about a quarter, which costs several times a long line's
// size in copies) but never past the cap.
func (r *Reader) grow(n int) {
	need := len(r.buf) + n
	if need <= cap(r.buf) {
		return
	}
	c := max(2*cap(r.buf), need, readBufferSize)
	c = min(c, max(need, r.max+1))
	nb := make([]byte, len(r.buf), c)
	copy(nb, r.buf)
	r.buf = nb
}

// tooLong builds the error for the current line; unfinished says the rest
// of the line is still unread and must be skipped by the next ReadLine.
func (r *Reader) tooLong(chunk []byte, unfinished bool) error {
	r.line++
	prefix := make([]byte, 0, prefixLen)
	prefix = append(prefix, r.buf[:min(len(r.buf), prefixLen)]...)
	prefix = append(prefix, chunk[:min(len(chunk), prefixLen-len(prefix))]...)
	r.buf = r.buf[:0]
	r.discard = unfinished
	return &LineTooLongError{Line: r.line, Limit: r.max, Prefix: prefix}
}

// skipLine consumes input up to and including the next newline.
func (r *Reader) skipLine() error {
	for {
		_, err := r.br.ReadSlice('\n')
		switch {
		case err == nil:
			r.discard = false
			return nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			r.discard = false
			return err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	return bytes.TrimSuffix(b, []byte{'\r'})
}
