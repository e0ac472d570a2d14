package config

import (
	"fmt"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary bytes to both parsers and the skill front
// matter splitter: no panic, no hang, and every syntax error has a
// position.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"a": [1, 2,], /* c */ "b": {"c": null}}`))
	f.Add([]byte("- role: system\n  content: |\n    hi\n"))
	f.Add([]byte("---\nname: x\ndescription: y\n---\nbody"))
	f.Add([]byte("{\"a\": \"\xff\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		timer := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("HANG on %q", b)) })
		defer timer.Stop()
		if _, err := parseJSONC(b); err != nil && err.line < 1 {
			t.Fatalf("JSONC error without a line: %v", err)
		}
		if _, err := parseYAML(b, 0); err != nil && err.line < 0 {
			t.Fatalf("YAML error with a negative line: %v", err)
		}
		if fm, ok := frontMatter(b); ok {
			_, _ = parseYAML(fm, 1)
		}
	})
}
