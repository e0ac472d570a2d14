package strictjson_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/internal/strictjson"
)

func TestRead(t *testing.T) {
	names := []string{"model", "max_tokens", "sandbox"}
	for name, tc := range map[string]struct {
		body, wantErr, wantName string
	}{
		"plain":                {body: `{"model":"m","messages":[{"a":1}],"x":null}`},
		"whitespace around":    {body: " \t\r\n{ \"model\" : \"m\" }\n "},
		"empty object":         {body: `{}`},
		"escaped value":        {body: `{"model":"\u0063\ud83d\ude00"}`},
		"duplicate":            {body: `{"model":"a","model":"b"}`, wantErr: `"model" twice`, wantName: "model"},
		"escaped duplicate":    {body: `{"model":"a","mod\u0065l":"b"}`, wantErr: `"model" twice`},
		"nested duplicate":     {body: `{"m":[{"x":1,"x":2}]}`, wantErr: `"x" twice in one object (at /m/0)`, wantName: "m"},
		"case twin":            {body: `{"Model":"a"}`, wantErr: `"Model" differs from "model"`, wantName: "Model"},
		"unicode fold twin":    {body: `{"ſandbox":"a"}`, wantErr: `differs from "sandbox"`},
		"kelvin fold twin":     {body: `{"max_to\u212aens":1}`, wantErr: `differs from "max_tokens"`},
		"punctuation twin":     {body: `{"maxtokens":1}`, wantErr: `differs from "max_tokens"`},
		"nested case is fine":  {body: `{"a":{"Model":1,"model":2}}`},
		"invalid utf-8":        {body: "{\"model\":\"\xff\"}", wantErr: "UTF-8"},
		"lone surrogate":       {body: `{"model":"\udc00"}`, wantErr: "surrogate"},
		"bom":                  {body: "\xef\xbb\xbf{}", wantErr: "byte order mark"},
		"trailing":             {body: `{} x`, wantErr: "data after"},
		"two objects":          {body: `{}{}`, wantErr: "data after"},
		"array":                {body: `[]`, wantErr: "not a JSON object"},
		"string":               {body: `"x"`, wantErr: "not a JSON object"},
		"truncated":            {body: `{"a":`, wantErr: "ends before"},
		"empty":                {body: ``, wantErr: "ends before"},
		"comment":              {body: `{/*x*/}`, wantErr: "invalid character"},
		"NaN":                  {body: `{"a":NaN}`, wantErr: "invalid character"},
		"leading zero":         {body: `{"a":01}`, wantErr: "invalid character"},
		"big number is fine":   {body: `{"a":1e400,"b":123456789012345678901234567890}`},
		"too deep":             {body: `{"a":` + string(bytes.Repeat([]byte("["), 600)) + string(bytes.Repeat([]byte("]"), 600)) + `}`, wantErr: "nests deeper than 512"},
		"deep inside a string": {body: `{"a":"` + string(bytes.Repeat([]byte("[{"), 600)) + `"}`},
	} {
		t.Run(name, func(t *testing.T) {
			obj, err := strictjson.Read([]byte(tc.body), strictjson.Options{Names: names})
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, obj)
				return
			}
			var se *strictjson.Error
			require.ErrorAs(t, err, &se)
			assert.Contains(t, se.Reason, tc.wantErr)
			if tc.wantName != "" {
				assert.Equal(t, tc.wantName, se.Name)
			}
		})
	}
}

func TestObject(t *testing.T) {
	body := []byte(`{"model":"m","n":2,"tags":{"a":"b"},"z":null}`)
	obj, err := strictjson.Read(body, strictjson.Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"model", "n", "tags", "z"}, obj.Names())
	s, ok, err := obj.String("model")
	assert.Equal(t, "m", s)
	assert.True(t, ok)
	assert.NoError(t, err)
	_, ok, err = obj.String("absent")
	assert.False(t, ok)
	assert.NoError(t, err)
	_, ok, err = obj.String("z")
	assert.True(t, ok)
	assert.ErrorContains(t, err, "z must be a string")
	var tags map[string]string
	require.NoError(t, obj.Decode("tags", &tags))
	assert.Equal(t, map[string]string{"a": "b"}, tags)
	assert.Equal(t, `{"a":"b"}`, string(obj.Raw("tags")))
	var into struct {
		Model string `json:"model"`
		N     int    `json:"N"` // json v2 matches names exactly: "n" is not "N"
	}
	require.NoError(t, obj.Into(&into))
	assert.Equal(t, "m", into.Model)
	assert.Zero(t, into.N)

	var strict struct {
		Model string `json:"model"`
	}
	err = strictjson.Unmarshal(body, &strict, strictjson.Options{})
	var se *strictjson.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "n", se.Name)
	assert.Equal(t, "it has a member n that this request does not take", se.Reason)
}

// TestWrongKindInJSONWords: a value of the wrong kind is named by its
// path and said in JSON's words (what it is, what to send), never Go's.
func TestWrongKindInJSONWords(t *testing.T) {
	var v struct {
		Stream bool `json:"stream"`
		A      struct {
			B []int `json:"b"`
		} `json:"a"`
		Name *string `json:"name"`
	}
	for body, want := range map[string][2]string{
		`{"stream":"true"}`:      {"stream", "stream is a string; send a boolean (true or false)"},
		`{"a":{"b":[1,"2"]}}`:    {"a.b[1]", "a.b[1] is a string; send a number (an integer)"},
		`{"a":[]}`:               {"a", "a is an array; send an object"},
		`{"name":{"first":"x"}}`: {"name", "name is an object; send a string"},
	} {
		obj, err := strictjson.Read([]byte(body), strictjson.Options{})
		require.NoError(t, err)
		err = obj.Into(&v)
		var se *strictjson.Error
		require.ErrorAs(t, err, &se, body)
		assert.Equal(t, want, [2]string{se.Name, se.Reason}, body)
		assert.NotContains(t, se.Reason, "Go", body)
	}
	var items []struct {
		B int `json:"b"`
	}
	var se *strictjson.Error
	require.ErrorAs(t, strictjson.UnmarshalAt("input", []byte(`[{"b":1},{"b":"x"}]`), &items), &se)
	assert.Equal(t, [2]string{"input[1].b", "input[1].b is a string; send a number (an integer)"}, [2]string{se.Name, se.Reason},
		"a member's value is named from the member")
	var n struct {
		N int `json:"n"`
	}
	obj, err := strictjson.Read([]byte(`{"n":1.5}`), strictjson.Options{})
	require.NoError(t, err)
	assert.ErrorContains(t, obj.Into(&n), "1.5", "a number of the right kind keeps the decoder's own reason")
}

// FuzzRead is the differential test of the reading itself: a body Read
// accepts has, to encoding/json (map) and to gjson (ForEach, the way the
// model proxy walks a body), exactly Read's members with exactly the same
// bytes, in the same order.
func FuzzRead(f *testing.F) {
	for _, s := range []string{`{"model":"m","a":[1,{"b":null}]}`, `{"model":"a","model":"b"}`, `{"a\u0000":1}`,
		`{"\u00e9":1,"é":2}`, `{"a":"\ud83d\ude00"}`, "{\"a\":\"\xff\"}", `{"a":1} `, `{}`, `{"":1}`, `{"a\\"b":1}`,
		`{"a":-0.0e+0}`, `{"a":"\/"}`, `{"a"  :  1  ,  "b":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, err := strictjson.Read(body, strictjson.Options{Names: []string{"model", "max_tokens"}})
		if err != nil {
			return
		}
		var mp map[string]json.RawMessage
		if err := json.Unmarshal(body, &mp); err != nil {
			t.Fatalf("accepted, but encoding/json refuses it: %v", err)
		}
		if len(mp) != len(obj.Names()) {
			t.Fatalf("encoding/json sees %d members, Read %d", len(mp), len(obj.Names()))
		}
		for _, name := range obj.Names() {
			if !bytes.Equal(mp[name], obj.Raw(name)) {
				t.Fatalf("member %q: encoding/json %q, Read %q", name, mp[name], obj.Raw(name))
			}
		}
		if !gjson.ValidBytes(body) {
			t.Fatal("accepted, but gjson calls it invalid")
		}
		i := 0
		gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
			if i >= len(obj.Names()) {
				t.Fatalf("gjson sees more members than Read")
			}
			if name := obj.Names()[i]; k.String() != name || v.Raw != string(obj.Raw(name)) {
				t.Fatalf("member %d: gjson %q=%q, Read %q=%q", i, k.String(), v.Raw, name, obj.Raw(name))
			}
			i++
			return true
		})
		if i != len(obj.Names()) {
			t.Fatalf("gjson sees %d members, Read %d", i, len(obj.Names()))
		}
	})
}
