package executor_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func ptr(s string) *string { return &s }

const goSrc = `package main

import "fmt"

func main() {
	x := 1
	fmt.Println(x)
	debugLog()
}
`

func TestApplyEdits(t *testing.T) {
	tests := map[string]struct {
		src     string
		edits   []executor.Edit
		want    string
		changes []executor.Change
	}{
		"no edits is identity": {
			src: goSrc, edits: nil, want: goSrc, changes: []executor.Change{},
		},
		"replace exact": {
			src:     goSrc,
			edits:   []executor.Edit{{Old: "x := 1", New: ptr("x := 2")}},
			want:    strings.Replace(goSrc, "x := 1", "x := 2", 1),
			changes: []executor.Change{{Line: 6, Removed: 1, Added: 1}},
		},
		"replace all": {
			src:     "a b a b a\n",
			edits:   []executor.Edit{{Old: "a", New: ptr("c"), All: true}},
			want:    "c b c b c\n",
			changes: []executor.Change{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
		},
		"replace with more lines": {
			src:     "one\ntwo\nthree\n",
			edits:   []executor.Edit{{Old: "two\n", New: ptr("2a\n2b\n")}},
			want:    "one\n2a\n2b\nthree\n",
			changes: []executor.Change{{Line: 2, Removed: 1, Added: 2}},
		},
		"replace with empty new": {
			src:   "keep drop keep",
			edits: []executor.Edit{{Old: " drop", New: ptr("")}},
			want:  "keep keep", changes: []executor.Change{{Line: 1, Removed: 1, Added: 0}},
		},
		"replace trailing whitespace tolerated": {
			src:     "a\nfoo()   \nb\n",
			edits:   []executor.Edit{{Old: "foo()\nb  ", New: ptr("bar()\nb")}},
			want:    "a\nbar()\nb\n",
			changes: []executor.Change{{Line: 2, Removed: 2, Added: 2}},
		},
		"replace crlf tolerated": {
			src:   "a\r\nfoo()\r\nb\r\n",
			edits: []executor.Edit{{Old: "a\nfoo()\n", New: ptr("a\r\nbar()\r\n")}},
			want:  "a\r\nbar()\r\nb\r\n", changes: []executor.Change{{Line: 1, Removed: 2, Added: 2}},
		},
		"replace indent adjusted and reindented": {
			src: goSrc,
			edits: []executor.Edit{{
				Old: "x := 1\nfmt.Println(x)",
				New: ptr("x := 1\nif x > 0 {\n\tfmt.Println(x)\n}"),
			}},
			want:    strings.Replace(goSrc, "\tx := 1\n\tfmt.Println(x)", "\tx := 1\n\tif x > 0 {\n\t\tfmt.Println(x)\n\t}", 1),
			changes: []executor.Change{{Line: 6, Removed: 2, Added: 4}},
		},
		"replace indent adjusted from deeper anchor": {
			src:   "def f():\n  if a:\n    b()\n",
			edits: []executor.Edit{{Old: "        if a:\n          b()", New: ptr("        if a:\n          c()\n\n          d()")}},
			want:  "def f():\n  if a:\n    c()\n\n    d()\n", changes: []executor.Change{{Line: 2, Removed: 2, Added: 4}},
		},
		"indent adjusted needs the same relative indentation": {
			src:   "if a:\n  b()\nif a:\n    b()\n",
			edits: []executor.Edit{{Old: "\tif a:\n\t    b()", New: ptr("x")}},
			want:  "if a:\n  b()\nx\n", changes: []executor.Change{{Line: 3, Removed: 2, Added: 1}},
		},
		"replace a line quoted without its indentation": {
			src:   "func f() {\n\tx()  \n}\n",
			edits: []executor.Edit{{Old: "x()", New: ptr("if ok {\n\tx()\n}")}},
			want:  "func f() {\n\tif ok {\n\t\tx()\n\t}\n}\n", changes: []executor.Change{{Line: 2, Removed: 1, Added: 3}},
		},
		"exact wins over normalised": {
			src:   "  foo\nfoo\n",
			edits: []executor.Edit{{Old: "  foo", New: ptr("bar")}},
			want:  "bar\nfoo\n", changes: []executor.Change{{Line: 1, Removed: 1, Added: 1}},
		},
		"delete consumes newline of complete line": {
			src:     goSrc,
			edits:   []executor.Edit{{Old: "\tdebugLog()", Delete: true}},
			want:    strings.Replace(goSrc, "\tdebugLog()\n", "", 1),
			changes: []executor.Change{{Line: 8, Removed: 1, Added: 0}},
		},
		"delete with its own newline": {
			src:   "a\n// TODO: remove\nb\n",
			edits: []executor.Edit{{Old: "// TODO: remove\n", Delete: true}},
			want:  "a\nb\n", changes: []executor.Change{{Line: 2, Removed: 1, Added: 0}},
		},
		"delete part of a line keeps newline": {
			src:   "f(a, debug)\n",
			edits: []executor.Edit{{Old: ", debug", Delete: true}},
			want:  "f(a)\n", changes: []executor.Change{{Line: 1, Removed: 1, Added: 0}},
		},
		"delete indent adjusted": {
			src:   "x\n    debugLog()\ny\n",
			edits: []executor.Edit{{Old: "debugLog()  ", Delete: true}},
			want:  "x\ny\n", changes: []executor.Change{{Line: 2, Removed: 1, Added: 0}},
		},
		"delete crlf line": {
			src:   "a\r\n  log()\r\nb\r\n",
			edits: []executor.Edit{{Old: "log()", Delete: true}},
			want:  "a\r\nb\r\n", changes: []executor.Change{{Line: 2, Removed: 1, Added: 0}},
		},
		"delete all": {
			src:   "a\nlog()\nb\nlog()\n",
			edits: []executor.Edit{{Old: "log()", Delete: true, All: true}},
			want:  "a\nb\n", changes: []executor.Change{{2, 1, 0}, {4, 1, 0}},
		},
		"insert after complete line": {
			src:     "import { foo } from 'foo';\nmain();\n",
			edits:   []executor.Edit{{Old: "import { foo } from 'foo';", Insert: "after", Content: ptr("import { bar } from 'bar';")}},
			want:    "import { foo } from 'foo';\nimport { bar } from 'bar';\nmain();\n",
			changes: []executor.Change{{Line: 2, Removed: 0, Added: 1}},
		},
		"insert after last line without newline": {
			src:   "a\nb",
			edits: []executor.Edit{{Old: "b", Insert: "after", Content: ptr("c")}},
			want:  "a\nb\nc", changes: []executor.Change{{Line: 3, Removed: 0, Added: 1}},
		},
		"insert before complete line": {
			src:   "a\nb\n",
			edits: []executor.Edit{{Old: "b", Insert: "before", Content: ptr("x")}},
			want:  "a\nx\nb\n", changes: []executor.Change{{Line: 2, Removed: 0, Added: 1}},
		},
		"insert inside a line is verbatim": {
			src:   "f(a)\n",
			edits: []executor.Edit{{Old: "a", Insert: "after", Content: ptr(", b")}},
			want:  "f(a, b)\n", changes: []executor.Change{{Line: 1, Removed: 0, Added: 1}},
		},
		"insert after indent adjusted reindents": {
			src:   "func f() {\n\tx()\n}\n",
			edits: []executor.Edit{{Old: "x()", Insert: "after", Content: ptr("y()\nz()")}},
			want:  "func f() {\n\tx()\n\ty()\n\tz()\n}\n", changes: []executor.Change{{Line: 3, Removed: 0, Added: 2}},
		},
		"insert before all": {
			src:   "f()\ng()\nf()\n",
			edits: []executor.Edit{{Old: "f()", Insert: "before", Content: ptr("// f"), All: true}},
			want:  "// f\nf()\ng()\n// f\nf()\n", changes: []executor.Change{{1, 0, 1}, {3, 0, 1}},
		},
		"insert start": {
			src:   "body\n",
			edits: []executor.Edit{{Insert: "start", Content: ptr("// header")}},
			want:  "// header\nbody\n", changes: []executor.Change{{Line: 1, Removed: 0, Added: 1}},
		},
		"insert end": {
			src:   "body\n",
			edits: []executor.Edit{{Insert: "end", Content: ptr("export default main;")}},
			want:  "body\nexport default main;", changes: []executor.Change{{Line: 2, Removed: 0, Added: 1}},
		},
		"insert end after last line without newline": {
			src:   "body",
			edits: []executor.Edit{{Insert: "end", Content: ptr("tail\n")}},
			want:  "body\ntail\n", changes: []executor.Change{{Line: 2, Removed: 0, Added: 1}},
		},
		"insert into empty file": {
			src:   "",
			edits: []executor.Edit{{Insert: "start", Content: ptr("first")}},
			want:  "first", changes: []executor.Change{{Line: 1, Removed: 0, Added: 1}},
		},
		"two inserts at the same place keep their order": {
			src:   "x\n",
			edits: []executor.Edit{{Insert: "end", Content: ptr("a\n")}, {Insert: "end", Content: ptr("b\n")}},
			want:  "x\na\nb\n", changes: []executor.Change{{2, 0, 1}, {2, 0, 1}},
		},
		"range level 3 anchor reindents": {
			src:   "class A:\n    def f(self):\n        return 1\n",
			edits: []executor.Edit{{From: "  def f(self): ", To: "      return 1", Content: ptr("  def f(self):\n      return 2")}},
			want:  "class A:\n    def f(self):\n        return 2\n", changes: []executor.Change{{Line: 2, Removed: 2, Added: 2}},
		},
		"range inclusive": {
			src: "a\nfunction old() {\n  return 1;\n} // old\nb\n",
			edits: []executor.Edit{{
				From: "function old() {", To: "} // old", Content: ptr("function new() {\n  return 42;\n}"),
			}},
			want:    "a\nfunction new() {\n  return 42;\n}\nb\n",
			changes: []executor.Change{{Line: 2, Removed: 3, Added: 3}},
		},
		"range picks the first to after from": {
			src:   "end\nstart\nx\nend\ny\nend\n",
			edits: []executor.Edit{{From: "start", To: "end", Content: ptr("z")}},
			want:  "end\nz\ny\nend\n", changes: []executor.Change{{Line: 2, Removed: 3, Added: 1}},
		},
		"range with empty content removes": {
			src:   "a[1,2,3]b",
			edits: []executor.Edit{{From: "[", To: "]", Content: ptr("")}},
			want:  "ab", changes: []executor.Change{{Line: 1, Removed: 1, Added: 0}},
		},
		"range indent adjusted reindents": {
			src:   "class A:\n    def f(self):\n        return 1\n",
			edits: []executor.Edit{{From: "def f(self):", To: "return 1", Content: ptr("def f(self):\n    return 2")}},
			want:  "class A:\n    def f(self):\n        return 2\n", changes: []executor.Change{{Line: 2, Removed: 2, Added: 2}},
		},
		"edits resolve against the original": {
			src: "a\nb\nc\n",
			edits: []executor.Edit{
				{Old: "a", New: ptr("b")},
				{Old: "b", New: ptr("B")},
				{Insert: "start", Content: ptr("top")},
			},
			want:    "top\nb\nB\nc\n",
			changes: []executor.Change{{1, 0, 1}, {1, 1, 1}, {2, 1, 1}},
		},
		"adjacent edits do not overlap": {
			src:   "abcd",
			edits: []executor.Edit{{Old: "ab", New: ptr("1")}, {Old: "cd", New: ptr("2")}},
			want:  "12", changes: []executor.Change{{1, 1, 1}, {1, 1, 1}},
		},
		"mode precedence range over insert over delete over replace": {
			src: "a b c d\n",
			edits: []executor.Edit{
				{From: "a", To: "b", Content: ptr("R"), Insert: "after", Old: "c", Delete: true},
				{Insert: "after", Old: "c", Content: ptr("I"), Delete: true, New: ptr("X")},
				{Old: "d", Delete: true, New: ptr("X")},
			},
			want:    "R cI \n",
			changes: []executor.Change{{1, 1, 1}, {1, 0, 1}, {1, 1, 0}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := executor.ApplyEdits(tc.src, tc.edits)
			require.NoError(t, err)
			assert.Equal(t, tc.want, res.Content)
			assert.Equal(t, len(tc.edits), res.Applied)
			assert.Equal(t, tc.changes, res.Changes)
		})
	}
}

// editErrorCases are edits that ApplyEdits must refuse; want holds parts
// of the message and index the failing edit.
var editErrorCases = map[string]struct {
	src   string
	edits []executor.Edit
	index int
	want  []string
}{
	"not found quotes the anchor": {
		src: goSrc, edits: []executor.Edit{{Old: "retrun 1;", New: ptr("x")}},
		want: []string{"edit 1 (replace)", `old text not found: "retrun 1;"`, "copy it exactly"},
	},
	"ambiguous says how many and suggests": {
		src: "x\ny\nx\nx\n", edits: []executor.Edit{{Old: "x", New: ptr("z")}},
		want: []string{"matches 3 places", "lines 1, 3, 4", "more surrounding lines", "all:true"},
	},
	"ambiguous at normalised level": {
		src: "  a\n  a\n", edits: []executor.Edit{{Old: "a ", Delete: true}},
		want: []string{"edit 1 (delete)", "matches 2 places"},
	},
	"ambiguous from": {
		src: "f\nf\ng\n", edits: []executor.Edit{{From: "f", To: "g", Content: ptr("")}},
		want: []string{"edit 1 (range)", "from text", "matches 2 places"},
	},
	"to missing after from": {
		src: "end\nstart\n", edits: []executor.Edit{{From: "start", To: "end", Content: ptr("")}},
		want: []string{`to text "end" not found after the from text (line 2)`},
	},
	"range needs both anchors": {
		src: "a", edits: []executor.Edit{{From: "a", Content: ptr("")}},
		want: []string{"needs both from and to"},
	},
	"range needs content": {
		src: "ab", edits: []executor.Edit{{From: "a", To: "b"}},
		want: []string{"needs content"},
	},
	"range with all": {
		src: "ab", edits: []executor.Edit{{From: "a", To: "b", Content: ptr(""), All: true}},
		want: []string{"all:true does not apply"},
	},
	"insert needs content": {
		src: "a", edits: []executor.Edit{{Old: "a", Insert: "after"}},
		want: []string{"edit 1 (insert after)", "needs content"},
	},
	"insert bad position": {
		src: "a", edits: []executor.Edit{{Old: "a", Insert: "middle", Content: ptr("x")}},
		want: []string{`insert is "middle"`, `"before", "after", "start" or "end"`},
	},
	"insert before needs old": {
		src: "a", edits: []executor.Edit{{Insert: "before", Content: ptr("x")}},
		want: []string{"needs old text"},
	},
	"insert end takes no old": {
		src: "a", edits: []executor.Edit{{Old: "a", Insert: "end", Content: ptr("x")}},
		want: []string{"takes no old text"},
	},
	"delete needs old": {
		src: "a", edits: []executor.Edit{{Delete: true}},
		want: []string{"delete needs the old text"},
	},
	"replace needs new": {
		src: "a", edits: []executor.Edit{{Old: "a"}},
		want: []string{"new is missing"},
	},
	"empty edit": {
		src: "a", edits: []executor.Edit{{}},
		want: []string{"set old"},
	},
	"blank anchor does not match blank lines": {
		src: "a\n\n\nb\n", edits: []executor.Edit{{Old: " \n", Delete: true}},
		want: []string{"not found"},
	},
	"overlapping edits rejected": {
		src: "abcdef", index: 1,
		edits: []executor.Edit{{Old: "bcd", New: ptr("x")}, {Old: "cde", New: ptr("y")}},
		want:  []string{"edit 2 (replace): overlaps edit 1 at line 1"},
	},
	"insert inside a replaced region rejected": {
		src: "a\nb\nc\n", index: 1,
		edits: []executor.Edit{{From: "a", To: "c", Content: ptr("x")}, {Old: "b", Insert: "before", Content: ptr("y")}},
		want:  []string{"edit 2 (insert before): overlaps edit 1"},
	},
	"same region twice rejected": {
		src: "a b", index: 2,
		edits: []executor.Edit{{Old: "a", New: ptr("1")}, {Old: "b", New: ptr("2")}, {Old: "b", Delete: true}},
		want:  []string{"edit 3 (delete): overlaps edit 2"},
	},
	"long anchor is shortened": {
		src: "a", edits: []executor.Edit{{Old: strings.Repeat("z", 500), New: ptr("")}},
		want: []string{`"` + strings.Repeat("z", 120) + `"...`},
	},
	"second edit fails": {
		src: "a b", index: 1,
		edits: []executor.Edit{{Old: "a", New: ptr("1")}, {Old: "c", New: ptr("2")}},
		want:  []string{"edit 2 (replace)", `"c"`},
	},
}

func TestApplyEditsErrors(t *testing.T) {
	for name, tc := range editErrorCases {
		t.Run(name, func(t *testing.T) {
			res, err := executor.ApplyEdits(tc.src, tc.edits)
			require.Error(t, err)
			assert.Equal(t, executor.EditResult{}, res)
			require.ErrorIs(t, err, executor.ErrInvalid)
			var ee *executor.EditError
			require.True(t, errors.As(err, &ee))
			assert.Equal(t, tc.index, ee.Index)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestEditErrorMessagesGolden keeps every edit error message in
// testdata/edit_errors.golden for review; go test -run Golden -update
// rewrites it.
func TestEditErrorMessagesGolden(t *testing.T) {
	names := slices.Sorted(maps.Keys(editErrorCases))
	var b strings.Builder
	for _, name := range names {
		tc := editErrorCases[name]
		_, err := executor.ApplyEdits(tc.src, tc.edits)
		require.Error(t, err, name)
		fmt.Fprintf(&b, "%s:\n\t%s\n", name, err)
	}
	golden := filepath.Join("testdata", "edit_errors.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -run Golden -update to create it")
	assert.Equal(t, string(want), b.String())
}

func FuzzApplyEdits(f *testing.F) {
	f.Add(goSrc, "x := 1", "y", "", "", "", false, false)
	f.Add("a\n  b  \nc", "b", "", "after", "", "", true, false)
	f.Add("a\n\tb\nc\n", "  b\nc", "q\n  r", "", "", "", false, true)
	f.Add("x[1]y", "", "", "", "[", "]", false, false)
	f.Add("", "", "", "start", "", "", false, false)
	f.Fuzz(func(t *testing.T, src, old, content, insert, from, to string, all, del bool) {
		same, err := executor.ApplyEdits(src, nil)
		if err != nil || same.Content != src || same.Applied != 0 || len(same.Changes) != 0 {
			t.Fatalf("zero edits changed the source: %+v, %v", same, err)
		}
		edits := []executor.Edit{
			{Old: old, New: &content, All: all, Delete: del, Insert: insert, Content: &content, From: from, To: to},
			{Insert: "end", Content: &content},
		}
		res, err := executor.ApplyEdits(src, edits)
		if err != nil {
			if !errors.Is(err, executor.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if res.Applied != len(edits) {
			t.Fatalf("applied %d of %d", res.Applied, len(edits))
		}
		if !strings.HasSuffix(res.Content, content) {
			t.Fatalf("insert end lost: %q", res.Content)
		}
	})
}

func TestEditFile(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	p := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(p, []byte(goSrc), 0o600))

	res, err := ws.EditFile(ctx, "/workspace/main.go", []executor.Edit{
		{Old: "x := 1", New: ptr("x := 2")},
		{Old: "debugLog()", Delete: true},
	})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Applied)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	want := strings.Replace(strings.Replace(goSrc, "x := 1", "x := 2", 1), "\tdebugLog()\n", "", 1)
	assert.Equal(t, want, string(got))
	assert.Equal(t, want, res.Content)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "mode is kept")

	// A failing edit writes nothing.
	_, err = ws.EditFile(ctx, "main.go", []executor.Edit{{Old: "x := 2", New: ptr("x := 3")}, {Old: "nope", New: ptr("")}})
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "main.go")
	got, err = os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, want, string(got))

	_, err = ws.EditFile(ctx, "missing.go", []executor.Edit{{Insert: "end", Content: ptr("x")}})
	require.ErrorIs(t, err, executor.ErrNotFound)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary files are left behind")
}

func TestEditFileKeepsOwner(t *testing.T) {
	testenv.RequireRoot(t, "chown to another user")
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{UID: 1000, GID: 1000})
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("a\n"), 0o640))
	require.NoError(t, os.Chown(p, 1234, 4321))
	_, err := ws.EditFile(context.Background(), "f", []executor.Edit{{Old: "a", New: ptr("b")}})
	require.NoError(t, err)
	uid, gid := owner(t, p)
	assert.Equal(t, [2]int{1234, 4321}, [2]int{uid, gid})
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
}
