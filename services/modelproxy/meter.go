package modelproxy

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
)

// maxMeterLine is the longest SSE line the meter parses; usage events are
// small, longer lines (big content deltas) are skipped, not buffered.
const maxMeterLine = 1 << 20

// maxMeterJSON is the largest non-streamed body kept for reading usage.
const maxMeterJSON = 8 << 20

// meter reads usage from a Messages API response as it streams past:
// message_start's message.usage, overridden field by field by
// message_delta's cumulative usage (SSE), or the body's usage (JSON).
type meter struct {
	sse     bool
	line    []byte
	skip    bool // inside a line longer than maxMeterLine
	body    []byte
	overCap bool
	usage   executor.Usage
}

func newMeter(sse bool) *meter { return &meter{sse: sse} }

// Write feeds response bytes; it never fails.
func (m *meter) Write(p []byte) {
	if !m.sse {
		if !m.overCap && len(m.body)+len(p) <= maxMeterJSON {
			m.body = append(m.body, p...)
		} else {
			m.overCap, m.body = true, nil
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !m.skip {
			if len(m.line)+len(chunk) > maxMeterLine {
				m.skip, m.line = true, m.line[:0]
			} else {
				m.line = append(m.line, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !m.skip {
			m.sseLine(m.line)
		}
		m.line, m.skip = m.line[:0], false
		p = p[i+1:]
	}
}

func (m *meter) sseLine(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if !ok {
		return
	}
	switch gjson.GetBytes(data, "type").String() {
	case "message_start":
		m.merge(gjson.GetBytes(data, "message.usage"))
	case "message_delta":
		m.merge(gjson.GetBytes(data, "usage"))
	}
}

// merge sets the fields present in u.
func (m *meter) merge(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	set := func(dst *int64, key string) {
		if v := u.Get(key); v.Exists() && v.Type == gjson.Number {
			*dst = v.Int()
		}
	}
	set(&m.usage.InputTokens, "input_tokens")
	set(&m.usage.OutputTokens, "output_tokens")
	set(&m.usage.CacheCreationInputTokens, "cache_creation_input_tokens")
	set(&m.usage.CacheReadInputTokens, "cache_read_input_tokens")
}

// Usage returns what the response reported (zero when it had none).
func (m *meter) Usage() executor.Usage {
	if !m.sse && !m.overCap && len(m.body) > 0 {
		m.merge(gjson.GetBytes(m.body, "usage"))
		m.body = nil
	}
	return m.usage
}
