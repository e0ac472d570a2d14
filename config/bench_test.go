package config

import "testing"

// BenchmarkLoad measures loading the fixture gateway (3 assistants, 3
// connectors, 5 skills) against parsing its largest file alone.
func BenchmarkLoad(b *testing.B) {
	b.Run("gateway", func(b *testing.B) {
		opts := testOptions()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Load("testdata/gateway", opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("package.yao parse only", func(b *testing.B) {
		src := []byte(`{"name": "Coder", "connector": "deepseek.v3", "sandbox": {"command": "claude", "max_memory": "4g", "arguments": {"max_turns": 20}}}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseJSONC(src); err != nil {
				b.Fatal(err)
			}
		}
	})
}
