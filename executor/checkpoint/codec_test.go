package checkpoint

import (
	"bytes"
	"testing"
	"time"
)

// FuzzDecodeManifest: a damaged manifest is an error, never a panic or a
// huge allocation, and what decodes encodes back to the same bytes.
func FuzzDecodeManifest(f *testing.F) {
	m := &Manifest{ID: "ck_0000000000001deadbeef", Parent: "", Label: "turn 1", Created: time.Unix(0, 1),
		Entries: []Entry{
			{Path: "a\nb", Kind: KindFile, Mode: 0o644, Size: 3, Hash: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", MTime: time.Unix(0, 5), Ino: 7, CTime: 9},
			{Path: "d", Kind: KindDir, Mode: 0o755},
			{Path: "d/l", Kind: KindLink, Mode: 0o777, Target: "/etc/passwd"},
		},
		Skipped: []Skipped{{Path: "fifo", What: "fifo"}}, Files: 1, Bytes: 3}
	var buf bytes.Buffer
	if err := encodeManifest(&buf, m); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(manifestMagic))
	f.Add([]byte(manifestMagic + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(bytes.NewReader(b))
		if err != nil {
			return
		}
		var again bytes.Buffer
		if err := encodeManifest(&again, m); err != nil {
			return // e.g. a hash of the wrong length cannot decode either
		}
		m2, err := decodeManifest(bytes.NewReader(again.Bytes()))
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		if len(m2.Entries) != len(m.Entries) || m2.ID != m.ID {
			t.Fatalf("round trip changed the manifest")
		}
	})
}

// TestEncodeRefusesBadHashes: an entry whose hash is not 64 hex digits
// is an error, not a panic or a manifest that decodes to another hash.
func TestEncodeRefusesBadHashes(t *testing.T) {
	good := "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
	for name, hash := range map[string]string{
		"empty":     "",
		"too short": good[:62],
		"too long":  good + "00",
		"not hex":   "zz" + good[2:],
	} {
		t.Run(name, func(t *testing.T) {
			m := &Manifest{Entries: []Entry{{Path: "f", Kind: KindFile, Hash: hash}}}
			if err := encodeManifest(&bytes.Buffer{}, m); err == nil {
				t.Fatalf("hash %q encoded", hash)
			}
		})
	}
	var buf bytes.Buffer
	m := &Manifest{Entries: []Entry{{Path: "f", Kind: KindFile, Hash: good}, {Path: "g", Kind: KindFile, Hash: good}}}
	if err := encodeManifest(&buf, m); err != nil {
		t.Fatal(err)
	}
	back, err := decodeManifest(&buf)
	if err != nil || back.Entries[0].Hash != good || back.Entries[1].Hash != good {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}
