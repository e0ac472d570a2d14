package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/middleware"
)

// readingSeeds are bodies that readers are known to read differently, or
// nearly: the cases, escapes, nesting, BOMs, comments, numbers,
// NaN, trailing data. The fuzzer adds what it finds to
// testdata/fuzz/FuzzOneReading.
var readingSeeds = []string{
	`{"model":"coder","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"qa","messages":[]}`,
	`{"model":"nonexistent","model":"coder","messages":[]}`,
	`{"model":"coder","model":"nonexistent"}`,
	`{"Model":"coder"}`,
	`{"model":"qa","MODEL":"coder"}`,
	`{"mod\u0065l":"coder"}`,
	`{"model":"qa","mod\u0065l":"coder"}`,
	`{"model":"\u0063oder"}`,
	`{"model":"coder\u0000"}`,
	"{\"model\":\"coder\xff\"}",
	"{\"model\":\"c\xc3\x28oder\"}",
	`{"model":"coder\ud800"}`,
	`{"model":"\ud83d\ude00"}`,
	"\xef\xbb\xbf{\"model\":\"coder\"}",
	`{"model":"coder" /* c */}`,
	"{\"model\":\"qa\" // \"model\":\"coder\"\n}",
	`{"model":"qa"} {"model":"coder"}`,
	`{"model":"qa"} garbage`,
	`{"model":"coder",}`,
	`{'model':'coder'}`,
	`{"model":"qa","t":NaN}`,
	`{"model":"qa","t":1e400}`,
	`{"model":"qa","t":-0.0e-999999}`,
	`{"model":"qa","t":123456789012345678901234567890}`,
	`{"model":["coder"]}`,
	`{"model":{"id":"coder"}}`,
	`{"model":null}`,
	`{"model":true}`,
	`[{"model":"coder"}]`,
	`"coder"`,
	`{"a":{"model":"coder"}}`,
	`{"model":"qa","messages":[{"role":"user","role":"system"}]}`,
	`{"ſandbox":"x","model":"qa"}`,
	`{"ſtream":true,"model":"coder"}`,
	`{"model":"Coder"}`,
	`{"model":" coder"}`,
	`{"model":"co-der"}`,
	"{\"model\":\"qa\"}\x00",
	"\t\r\n {\"model\" : \"qa\" } \n",
	`{"model":"qa","x":[[[[[[[[[[]]]]]]]]]]}`,
	``,
	`{`,
	`{}`,
}

// FuzzOneReading is the differential test of the adapter's reading: for
// any body, what classify decides is what encoding/json (into a struct,
// as most Go handlers read, and into a map) and gjson read. A body the
// adapter accepts is accepted by all three, and all three read its model
// as the adapter does; a body passed on to Next names no sandboxed
// assistant to any of them, not even loosely. A body on which they
// disagree must be refused.
func FuzzOneReading(f *testing.F) {
	for _, s := range readingSeeds {
		f.Add([]byte(s))
	}
	cat, err := middleware.NewCatalog(
		&middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Runner: "scripted"}},
		&middleware.Assistant{ID: "qa"})
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Options{Handler: middleware.UnknownAssistant, Catalog: cat, Next: http.NotFoundHandler()})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte) {
		v, obj, e := s.classify(ctx, body, "chat completion request", knownFields)
		if e != nil {
			return // refused: no reader gets it
		}
		model, has, err := obj.String("model")
		if err != nil {
			t.Fatalf("classify accepted a body whose model it cannot read: %v", err)
		}

		var st struct {
			Model *string `json:"model"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("accepted, but encoding/json (struct) refuses it: %v", err)
		}
		var mp map[string]json.RawMessage
		if err := json.Unmarshal(body, &mp); err != nil {
			t.Fatalf("accepted, but encoding/json (map) refuses it: %v", err)
		}
		if !gjson.ValidBytes(body) {
			t.Fatalf("accepted, but gjson calls it invalid")
		}
		g := gjson.GetBytes(body, "model")

		if (st.Model != nil) != has || has && *st.Model != model {
			t.Fatalf("encoding/json (struct) reads model %v, the adapter %q (present %v)", deref(st.Model), model, has)
		}
		raw, inMap := mp["model"]
		var mm string
		if inMap {
			if err := json.Unmarshal(raw, &mm); err != nil {
				t.Fatalf("encoding/json (map) cannot read the model the adapter read: %v", err)
			}
		}
		if inMap != has || mm != model {
			t.Fatalf("encoding/json (map) reads model %q (present %v), the adapter %q (present %v)", mm, inMap, model, has)
		}
		if g.Exists() != has || has && (g.Type != gjson.String || g.Str != model) {
			t.Fatalf("gjson reads model %q (%v), the adapter %q (present %v)", g.Str, g.Type, model, has)
		}

		sandboxed := model == "coder"
		switch {
		case v == toAgentbox && !sandboxed:
			t.Fatalf("agentbox would answer model %q, which is not sandboxed", model)
		case v == toNext && sandboxed:
			t.Fatalf("the sandboxed assistant's request would reach Next")
		case v == toNext && looseName(model) == looseName("coder"):
			t.Fatalf("model %q reaches Next, which may look it up loosely as coder", model)
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return "<absent>"
	}
	return *s
}
