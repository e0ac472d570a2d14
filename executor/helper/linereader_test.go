package helper

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLineReader(t *testing.T) {
	tests := map[string]struct {
		in      string
		max     int
		want    []string
		wantErr error
	}{
		"lines":                {in: "a\nbb\n", max: 4, want: []string{"a", "bb"}},
		"last without newline": {in: "a\nbb", max: 4, want: []string{"a", "bb"}},
		"exactly the cap":      {in: "abcd\nx\n", max: 4, want: []string{"abcd", "x"}},
		"over the cap":         {in: "abcde\n", max: 4, wantErr: ErrFrameTooLarge},
		"over without newline": {in: "abcde", max: 4, wantErr: ErrFrameTooLarge},
		"long within cap":      {in: strings.Repeat("z", 200000) + "\n", max: 200000, want: []string{strings.Repeat("z", 200000)}},
		"long over cap":        {in: strings.Repeat("z", 200001) + "\n", max: 200000, wantErr: ErrFrameTooLarge},
		"empty":                {in: "", max: 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lr := NewLineReader(strings.NewReader(tc.in), tc.max)
			var got []string
			for {
				line, err := lr.ReadLine()
				if errors.Is(err, io.EOF) {
					break
				}
				if tc.wantErr != nil && err != nil {
					require.ErrorIs(t, err, tc.wantErr)
					return
				}
				require.NoError(t, err)
				got = append(got, string(line))
			}
			require.NoError(t, tc.wantErr, "expected an error")
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzLineReader(f *testing.F) {
	f.Add("a\nb\n", 3)
	f.Add("abcdef", 2)
	f.Fuzz(func(t *testing.T, in string, maxLine int) {
		if maxLine <= 0 || maxLine > 1<<16 {
			return
		}
		lr := NewLineReader(strings.NewReader(in), maxLine)
		for {
			line, err := lr.ReadLine()
			if err != nil {
				return
			}
			if len(line) > maxLine {
				t.Fatalf("line of %d bytes over the cap %d", len(line), maxLine)
			}
		}
	})
}

// FuzzFrameReader: any byte stream yields frames within the cap or an
// error, never a panic or an oversized allocation.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{frameStdout, 0, 0, 0, 2, 'h', 'i', frameExit, 0, 0, 0, 0})
	f.Add([]byte{frameRequest, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := &frameReader{r: bytes.NewReader(in)}
		defer fr.release()
		for {
			_, p, err := fr.next()
			if err != nil {
				return
			}
			if len(p) > MaxFrame {
				t.Fatalf("frame of %d bytes over the cap", len(p))
			}
		}
	})
}
