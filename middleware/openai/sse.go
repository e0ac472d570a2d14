package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// sseWriter writes one response's server-sent events, for every door. The
// status and headers go out with the first event, so that a request that
// fails before its first event still gets its error status; after that,
// errors travel as events of the door's API. Events are written whole
// under mu, and the heartbeat writes its keep-alive there too, so a
// keep-alive never splits an event.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	now func() time.Time
	// every is the idle time after which the heartbeat writes keepAlive (0:
	// none).
	every     time.Duration
	keepAlive []byte
	// open writes the door's first events when the stream starts (held:
	// mu; it writes with put).
	open func() error

	mu       sync.Mutex
	started  bool
	failed   error
	lastSend time.Time
	stop     chan struct{}
	stopped  sync.Once
}

func (s *Server) newSSE(w http.ResponseWriter, keepAlive string) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), now: s.now, every: max(s.opts.Heartbeat, 0),
		keepAlive: []byte(keepAlive), stop: make(chan struct{})}
}

// send writes the event name (none when "") with data, starting the stream
// first when needed. Held: mu.
func (x *sseWriter) send(name string, data []byte) error {
	if err := x.begin(); err != nil {
		return err
	}
	return x.put(name, data)
}

// begin starts the stream unless it started: the status, the headers, the
// door's first events and the heartbeat. Held: mu.
func (x *sseWriter) begin() error {
	if x.failed != nil || x.started {
		return x.failed
	}
	x.started = true
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	x.w.WriteHeader(http.StatusOK)
	if x.open != nil {
		if err := x.open(); err != nil {
			return err
		}
	}
	if x.every > 0 {
		go x.heartbeat()
	}
	return nil
}

// put writes one event and flushes it; a failed write marks the stream
// failed (the client went away). Held: mu, and the stream started.
func (x *sseWriter) put(name string, data []byte) error {
	if x.failed != nil {
		return x.failed
	}
	buf := make([]byte, 0, len(name)+len(data)+16)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	return x.raw(buf)
}

// raw writes b and flushes. Held: mu.
func (x *sseWriter) raw(b []byte) error {
	_, err := x.w.Write(b)
	if err == nil {
		err = x.rc.Flush()
	}
	x.lastSend = x.now()
	if err != nil {
		x.failed = fmt.Errorf("openai: the client went away: %w", err)
	}
	return x.failed
}

// refuse answers e with its status in sh's shape when the stream has not
// started, and reports whether it did. Held: mu.
func (x *sseWriter) refuse(sh errorShape, e *middleware.Error) bool {
	if x.started {
		return false
	}
	x.started = true
	sh.write(x.w, 0, e)
	return true
}

// end stops the heartbeat; the stream writes nothing more.
func (x *sseWriter) end() { x.stopped.Do(func() { close(x.stop) }) }

// heartbeat writes keepAlive when the stream was idle for x.every, so that
// proxies do not close it while a container starts or a tool runs.
func (x *sseWriter) heartbeat() {
	d := x.every
	// A timer due d after the last write: a ticker of period d would see
	// a little less than d of idleness on every other tick and skip it,
	// leaving gaps of 2d.
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
			x.mu.Lock()
			idle := x.now().Sub(x.lastSend)
			if x.failed == nil && idle >= d {
				_ = x.raw(x.keepAlive)
				idle = 0
			}
			x.mu.Unlock()
			t.Reset(max(d-idle, time.Millisecond))
		}
	}
}

// eventWriter writes a door's typed events, each a JSON object with its
// "type" under an SSE event of that name, when its run streams (out is nil
// when the response is answered whole: then it writes nothing).
type eventWriter struct {
	out     *sseWriter
	textMax int
	// numbered adds "sequence_number" to every event (Responses).
	numbered bool
	seq      int
}

// send writes an event of type typ with fields, starting the stream when
// needed. Held: out.mu.
func (e *eventWriter) send(typ string, fields map[string]any) error {
	if e.out == nil {
		return nil
	}
	if err := e.out.begin(); err != nil {
		return err
	}
	return e.put(typ, fields)
}

// put is send on a started stream: the stream's first events. Held:
// out.mu.
func (e *eventWriter) put(typ string, fields map[string]any) error {
	fields["type"] = typ
	if e.numbered {
		fields["sequence_number"] = e.seq
		e.seq++
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("openai: encode %s: %w", typ, err)
	}
	return e.out.put(typ, b)
}

// extension sends ev in the agentbox extension of events of type typ:
// texts split across events, large payloads cut to fit a line. Held:
// out.mu.
func (e *eventWriter) extension(typ string, ev executor.Event) error {
	if e.out == nil {
		return nil
	}
	if err := e.out.begin(); err != nil {
		return err
	}
	if plainText(ev) {
		for _, piece := range split(ev.Text, e.textMax) {
			if err := e.put(typ, map[string]any{"agentbox": &extension{Kind: string(ev.Kind), Text: piece}}); err != nil {
				return err
			}
		}
		return nil
	}
	b, err := fitLine(ev, e.textMax, func(ext *extension) any {
		f := map[string]any{"type": typ, "agentbox": ext}
		if e.numbered {
			f["sequence_number"] = e.seq
		}
		return f
	})
	if err != nil {
		return err
	}
	if e.numbered {
		e.seq++
	}
	return e.out.put(typ, b)
}
