package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// result is one ReadLine outcome in a form tests can compare.
type result struct {
	Line    string
	TooLong int // line number of a LineTooLongError, 0 otherwise
}

// readAll drains r, collecting lines and too-long errors, and returns the
// terminal error (nil for a clean io.EOF).
func readAll(t testing.TB, r *Reader) ([]result, error) {
	out, _, err := readAllCap(t, r)
	return out, err
}

// readAllCap is readAll that also reports the largest assembly buffer the
// reader held.
func readAllCap(t testing.TB, r *Reader) ([]result, int, error) {
	t.Helper()
	var out []result
	maxCap := 0
	for i := 0; ; i++ {
		if i > 1<<20 {
			t.Fatal("reader does not terminate")
		}
		line, err := r.ReadLine()
		maxCap = max(maxCap, cap(r.buf))
		var tl *LineTooLongError
		switch {
		case err == nil:
			out = append(out, result{Line: string(line)})
		case errors.As(err, &tl):
			out = append(out, result{TooLong: tl.Line})
		case errors.Is(err, io.EOF):
			return out, maxCap, nil
		default:
			return out, maxCap, err
		}
	}
}

func TestReadLine(t *testing.T) {
	big := strings.Repeat("x", 3*readBufferSize+17)
	tests := map[string]struct {
		input string
		max   int
		want  []result
	}{
		"empty input":            {input: "", want: nil},
		"one line":               {input: "a\n", want: []result{{Line: "a"}}},
		"no final newline":       {input: "a\nb", want: []result{{Line: "a"}, {Line: "b"}}},
		"blank lines kept":       {input: "\n\na\n", want: []result{{Line: ""}, {Line: ""}, {Line: "a"}}},
		"crlf trimmed":           {input: "a\r\nb\r\n", want: []result{{Line: "a"}, {Line: "b"}}},
		"line longer than 64KiB": {input: big + "\nz\n", want: []result{{Line: big}, {Line: "z"}}},
		"exactly the cap":        {input: "abcd\nabcde\n", max: 4, want: []result{{Line: "abcd"}, {TooLong: 2}}},
		"exactly the cap at EOF": {input: "abcd", max: 4, want: []result{{Line: "abcd"}}},
		"too long then more": {input: "ok\n" + big + "\nafter\n", max: readBufferSize,
			want: []result{{Line: "ok"}, {TooLong: 2}, {Line: "after"}}},
		"too long at EOF":       {input: "ok\n" + big, max: 100, want: []result{{Line: "ok"}, {TooLong: 2}}},
		"two too long in a row": {input: "aaaaaa\nbbbbbb\nc\n", max: 3, want: []result{{TooLong: 1}, {TooLong: 2}, {Line: "c"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, src := range map[string]io.Reader{
				"whole":    strings.NewReader(tc.input),
				"one byte": iotest.OneByteReader(strings.NewReader(tc.input)),
			} {
				got, err := readAll(t, NewReader(src, tc.max))
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

func TestLineTooLongError(t *testing.T) {
	r := NewReader(strings.NewReader(strings.Repeat("y", 500)+"\n"), 10)
	_, err := r.ReadLine()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrLineTooLong)
	var tl *LineTooLongError
	require.ErrorAs(t, err, &tl)
	assert.Equal(t, 1, tl.Line)
	assert.Equal(t, 10, tl.Limit)
	assert.Equal(t, strings.Repeat("y", prefixLen), string(tl.Prefix))
	assert.Contains(t, err.Error(), "raise the line cap")
	_, err = r.ReadLine()
	assert.ErrorIs(t, err, io.EOF)
}

func TestReadLineUnderlyingError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("a\npartial"), iotest.ErrReader(boom)), 0)
	line, err := r.ReadLine()
	require.NoError(t, err)
	assert.Equal(t, "a", string(line))
	_, err = r.ReadLine()
	assert.ErrorIs(t, err, boom)
}

func TestReadLineReleasesHugeBuffer(t *testing.T) {
	huge := strings.Repeat("h", 4*keepBuffer)
	r := NewReader(strings.NewReader(huge+"\n"+huge+"\nsmall\nsmall2\n"), 0)
	for range 2 {
		line, err := r.ReadLine()
		require.NoError(t, err)
		assert.Len(t, line, len(huge))
	}
	line, err := r.ReadLine()
	require.NoError(t, err)
	assert.Equal(t, "small", string(line))
	line, err = r.ReadLine()
	require.NoError(t, err)
	assert.Equal(t, "small2", string(line))
	assert.LessOrEqual(t, cap(r.buf), keepBuffer, "released one short line after the long ones")
}

// reference splits input the simple way, applying the cap.
func reference(input []byte, max int) []result {
	if len(input) == 0 {
		return nil
	}
	parts := bytes.Split(input, []byte{'\n'})
	if len(parts[len(parts)-1]) == 0 {
		parts = parts[:len(parts)-1]
	}
	out := make([]result, 0, len(parts))
	for i, p := range parts {
		if len(p) > max {
			out = append(out, result{TooLong: i + 1})
			continue
		}
		out = append(out, result{Line: string(bytes.TrimSuffix(p, []byte{'\r'}))})
	}
	return out
}

func FuzzReadLine(f *testing.F) {
	f.Add([]byte("a\nb\n"), uint16(3), uint8(1))
	f.Add([]byte("{\"type\":\"result\"}\r\n\n"), uint16(0), uint8(7))
	f.Add(bytes.Repeat([]byte("z"), 70000), uint16(100), uint8(0))
	f.Fuzz(func(t *testing.T, input []byte, capArg uint16, chunk uint8) {
		limit := int(capArg)
		if limit == 0 {
			limit = DefaultMaxLine
		}
		var src io.Reader = bytes.NewReader(input)
		if chunk > 0 {
			src = &chunkReader{data: input, n: int(chunk)}
		}
		r := NewReader(src, int(capArg))
		got, maxCap, err := readAllCap(t, r)
		require.NoError(t, err)
		assert.Equal(t, reference(input, limit), got)
		// Memory stays bounded by the cap plus one read buffer (append may
		// double the assembly buffer once).
		assert.LessOrEqual(t, maxCap, 2*(min(limit, len(input))+readBufferSize))
	})
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// BenchmarkReadLine compares the bounded reader with the unbounded
// bufio.Reader.ReadBytes baseline over 16 MiB of lines of each size.
func BenchmarkReadLine(b *testing.B) {
	for _, size := range []int{100, 64 << 10, 8 << 20} {
		line := append(bytes.Repeat([]byte("x"), size), '\n')
		input := bytes.Repeat(line, max(1, (16<<20)/len(line)))
		b.Run(fmt.Sprintf("jsonl/line=%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				r := NewReader(bytes.NewReader(input), 0)
				for {
					if _, err := r.ReadLine(); err != nil {
						break
					}
				}
			}
		})
		b.Run(fmt.Sprintf("bufio.ReadBytes/line=%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				r := bufio.NewReaderSize(bytes.NewReader(input), readBufferSize)
				for {
					if _, err := r.ReadBytes('\n'); err != nil {
						break
					}
				}
			}
		})
	}
}
