package openai

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSplit checks that split loses nothing, respects the bound and never
// cuts a valid UTF-8 sequence.
func FuzzSplit(f *testing.F) {
	f.Add("hello, world", 3)
	f.Add("ü€😀 mixed", 2)
	f.Add(string([]byte{0xff, 0xc3, 'a', 0xe2, 0x82}), 1)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 4 || max > 1<<16 {
			max = 4 + (max&0x7fff)%64
		}
		pieces := split(s, max)
		if got := strings.Join(pieces, ""); got != s {
			t.Fatalf("split lost data: %q != %q", got, s)
		}
		for _, p := range pieces {
			if len(p) > max || p == "" {
				t.Fatalf("piece %q breaks the bound %d", p, max)
			}
		}
		if utf8.ValidString(s) {
			for _, p := range pieces {
				if !utf8.ValidString(p) {
					t.Fatalf("piece %q cuts a rune", p)
				}
			}
		}
	})
}
