package modelproxy

import (
	"bytes"

	"github.com/agentbox/agentbox/executor"
)

// maxMeterLine is the longest SSE line the meter parses; usage events are
// small, longer lines (big content deltas) are skipped, not buffered.
const maxMeterLine = 1 << 20

// maxMeterJSON is the largest non-streamed body kept for reading usage.
const maxMeterJSON = 8 << 20

// meter reads usage from a response as it streams past, in its API's way
// (apiSpec.usage for each SSE data line, usageJSON for a JSON body).
type meter struct {
	api     *apiSpec
	sse     bool
	line    []byte
	skip    bool // inside a line longer than maxMeterLine
	body    []byte
	overCap bool
	usage   executor.Usage
}

func newMeter(api *apiSpec, sse bool) *meter { return &meter{api: api, sse: sse} }

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
	if data := dataLine(line); data != nil {
		m.api.usage(data, &m.usage)
	}
}

// Usage returns what the response reported (zero when it had none).
func (m *meter) Usage() executor.Usage {
	if !m.sse && !m.overCap && len(m.body) > 0 {
		m.api.usageJSON(m.body, &m.usage)
		m.body = nil
	}
	return m.usage
}
