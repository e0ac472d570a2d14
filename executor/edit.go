package executor

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Edit modes, as EditError.Mode names them.
const (
	EditReplace = "replace"
	EditDelete  = "delete"
	EditInsert  = "insert"
	EditRange   = "range"
)

// EditError is why one edit of an ApplyEdits call failed. It wraps
// ErrInvalid; nothing is applied when any edit fails.
type EditError struct {
	// Index is the edit's position in the list (0-based).
	Index int
	// Mode is the edit's mode (EditReplace, ...).
	Mode string
	// Reason says what went wrong and what to do.
	Reason string
}

func (e *EditError) Error() string {
	return fmt.Sprintf("edit %d (%s): %s", e.Index+1, e.Mode, e.Reason)
}

// Unwrap returns ErrInvalid.
func (e *EditError) Unwrap() error { return ErrInvalid }

// ApplyEdits applies edits to source and returns the new content; it does
// no I/O. Every edit is resolved against the original source (not against
// the result of the edits before it), then all are applied at once; edits
// whose regions overlap are rejected. The mode of an edit is chosen by the
// fields it sets (see Edit), with precedence range > insert > delete >
// replace.
//
// Each anchor (Old, From, To) is looked up with three strategies in order,
// the first that finds anything wins:
//
//  1. exact: the text appears verbatim;
//  2. whole lines equal once trailing whitespace is stripped from both;
//  3. whole lines equal once, in addition, the common leading whitespace of
//     the anchor and of the file's lines is stripped; the replacement (New
//     or Content) is then re-indented from the anchor's indentation to the
//     file's.
//
// An anchor found more than once is an error unless All is set (replace,
// delete, insert before/after). Delete removes the newline after the match
// too when the match is made of complete lines; inserts before/after a
// match of complete lines insert complete lines. Insert "start" and "end"
// keep the content on lines of its own.
func ApplyEdits(source string, edits []Edit) (EditResult, error) {
	lines := splitLines(source)
	var spans []span
	for i, e := range edits {
		s, err := resolveEdit(source, lines, i, e)
		if err != nil {
			return EditResult{}, err
		}
		spans = append(spans, s...)
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end))
	})
	maxEnd, owner := 0, -1
	for _, s := range spans {
		if s.start < maxEnd {
			first, second := min(owner, s.edit), max(owner, s.edit)
			return EditResult{}, &EditError{
				Index: second, Mode: modeOf(edits[second]),
				Reason: fmt.Sprintf("overlaps edit %d at line %d; merge the two into one edit or make them change different text",
					first+1, lineOf(source, lines, s.start)),
			}
		}
		if s.end > maxEnd {
			maxEnd, owner = s.end, s.edit
		}
	}

	var b strings.Builder
	b.Grow(len(source))
	changes := make([]Change, 0, len(spans))
	pos := 0
	for _, s := range spans {
		b.WriteString(source[pos:s.start])
		b.WriteString(s.text)
		pos = s.end
		line, added := lineOf(source, lines, s.start), s.text
		if !isLineStart(source, s.start) && s.start == s.end && strings.HasPrefix(added, "\n") {
			// The newline ends the line inserted after; the text is the
			// next line.
			line, added = line+1, added[1:]
		}
		changes = append(changes, Change{
			Line:    line,
			Removed: countLines(source[s.start:s.end]),
			Added:   countLines(added),
		})
	}
	b.WriteString(source[pos:])
	return EditResult{Content: b.String(), Applied: len(edits), Changes: changes}, nil
}

// span replaces source[start:end] with text; edit is its edit's index.
type span struct {
	start, end int
	text       string
	edit       int
}

// match is where an anchor was found.
type match struct {
	start, end int
	// lines reports that the match is made of complete lines (it starts at
	// a line start and ends at a line end or just past its newline).
	lines bool
	// reindent re-indents replacement text for an indent-adjusted match.
	reindent func(string) string
}

func modeOf(e Edit) string {
	switch {
	case e.From != "" || e.To != "":
		return EditRange
	case e.Insert != "":
		return EditInsert + " " + e.Insert
	case e.Delete:
		return EditDelete
	default:
		return EditReplace
	}
}

// resolveEdit turns edit i into spans against the original source.
func resolveEdit(src string, lines []int, i int, e Edit) ([]span, error) {
	mode := modeOf(e)
	fail := func(format string, args ...any) error {
		return &EditError{Index: i, Mode: mode, Reason: fmt.Sprintf(format, args...)}
	}
	find := func(field, anchor string, all bool) ([]match, error) {
		ms := findAnchor(src, lines, anchor, 0)
		switch {
		case len(ms) == 0:
			return nil, fail("%s text not found: %s; copy it exactly from the file (whitespace differences are tolerated)", field, quote(anchor))
		case len(ms) > 1 && !all:
			at := make([]string, 0, 5)
			for _, m := range ms[:min(len(ms), 5)] {
				at = append(at, strconv.Itoa(lineOf(src, lines, m.start)))
			}
			more := ""
			if len(ms) > 5 {
				more = ", ..."
			}
			hint := " or set all:true to change every one"
			if field != "old" {
				hint = ""
			}
			return nil, fail("%s text %s matches %d places (lines %s%s); include more surrounding lines to make it unique%s",
				field, quote(anchor), len(ms), strings.Join(at, ", "), more, hint)
		}
		return ms, nil
	}

	switch {
	case e.From != "" || e.To != "":
		if e.From == "" || e.To == "" {
			return nil, fail("a range needs both from and to (inclusive anchors); set the missing one")
		}
		if e.Content == nil {
			return nil, fail("a range needs content (use \"\" to remove the range)")
		}
		if e.All {
			return nil, fail("all:true does not apply to a range; use one edit per range")
		}
		from, err := find("from", e.From, false)
		if err != nil {
			return nil, err
		}
		to := findAnchor(src, lines, e.To, from[0].end)
		if len(to) == 0 {
			return nil, fail("to text %s not found after the from text (line %d); copy it exactly from the file",
				quote(e.To), lineOf(src, lines, from[0].start))
		}
		return []span{{start: from[0].start, end: to[0].end, text: from[0].reindented(*e.Content), edit: i}}, nil

	case e.Insert != "":
		if e.Content == nil {
			return nil, fail("an insert needs content")
		}
		switch e.Insert {
		case "start", "end":
			if e.Old != "" {
				return nil, fail("insert %q takes no old text; use insert \"before\" or \"after\" to insert next to it", e.Insert)
			}
			return []span{insertEdge(src, e.Insert, *e.Content, i)}, nil
		case "before", "after":
			if e.Old == "" {
				return nil, fail("insert %q needs old text to anchor it; set old, or use insert \"start\"/\"end\"", e.Insert)
			}
			ms, err := find("old", e.Old, e.All)
			if err != nil {
				return nil, err
			}
			out := make([]span, 0, len(ms))
			for _, m := range ms {
				out = append(out, insertAt(src, m, e.Insert == "after", m.reindented(*e.Content), i))
			}
			return out, nil
		default:
			return nil, fail("insert is %q; use \"before\", \"after\", \"start\" or \"end\"", e.Insert)
		}

	case e.Delete:
		if e.Old == "" {
			return nil, fail("delete needs the old text to remove")
		}
		ms, err := find("old", e.Old, e.All)
		if err != nil {
			return nil, err
		}
		out := make([]span, 0, len(ms))
		for _, m := range ms {
			end := m.end
			if m.lines && end > 0 && src[end-1] != '\n' {
				// A complete line goes with its newline.
				if strings.HasPrefix(src[end:], "\r\n") {
					end += 2
				} else if strings.HasPrefix(src[end:], "\n") {
					end++
				}
			}
			out = append(out, span{start: m.start, end: end, edit: i})
		}
		return out, nil

	default:
		if e.Old == "" {
			return nil, fail("set old (the text to replace) and new, or one of delete, insert, from/to")
		}
		if e.New == nil {
			return nil, fail("old is set but new is missing; set new (\"\" or delete:true to remove)")
		}
		ms, err := find("old", e.Old, e.All)
		if err != nil {
			return nil, err
		}
		out := make([]span, 0, len(ms))
		for _, m := range ms {
			out = append(out, span{start: m.start, end: m.end, text: m.reindented(*e.New), edit: i})
		}
		return out, nil
	}
}

// wholeLine widens an exact single-line match that is its line's whole
// text but for surrounding whitespace to the complete line, re-indenting
// replacements with the line's indentation: models often quote a line
// without its indentation.
func wholeLine(src string, m match) match {
	ls := strings.LastIndexByte(src[:m.start], '\n') + 1
	indent := src[ls:m.start]
	le := len(src)
	if j := strings.IndexByte(src[m.end:], '\n'); j >= 0 {
		le = m.end + j
	}
	tail := strings.TrimRight(src[m.end:le], "\r")
	if strings.Trim(indent, " \t") != "" || strings.Trim(tail, " \t") != "" {
		return m
	}
	w := match{start: ls, end: m.end + len(tail), lines: true}
	if indent != "" {
		w.reindent = func(s string) string { return reindent(s, "", indent) }
	}
	return w
}

func (m match) reindented(s string) string {
	if m.reindent == nil {
		return s
	}
	return m.reindent(s)
}

// insertEdge places content at the start or end of src, on lines of its own.
func insertEdge(src, where, content string, i int) span {
	if where == "start" {
		if src != "" && content != "" && !strings.HasSuffix(content, "\n") {
			content += "\n"
		}
		return span{start: 0, end: 0, text: content, edit: i}
	}
	if src != "" && content != "" && !strings.HasSuffix(src, "\n") && !strings.HasPrefix(content, "\n") {
		content = "\n" + content
	}
	return span{start: len(src), end: len(src), text: content, edit: i}
}

// insertAt places content before or after m; next to complete lines it
// inserts complete lines.
func insertAt(src string, m match, after bool, content string, i int) span {
	if !m.lines || content == "" {
		pos := m.start
		if after {
			pos = m.end
		}
		return span{start: pos, end: pos, text: content, edit: i}
	}
	if !after {
		if !strings.HasSuffix(content, "\n") {
			content += "\n"
		}
		return span{start: m.start, end: m.start, text: content, edit: i}
	}
	pos := m.end
	switch {
	case pos > 0 && src[pos-1] == '\n':
	case pos < len(src) && src[pos] == '\n':
		pos++
	default: // the last line, without a newline
		return span{start: pos, end: pos, text: "\n" + strings.TrimSuffix(content, "\n"), edit: i}
	}
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	return span{start: pos, end: pos, text: content, edit: i}
}

// findAnchor returns the non-overlapping matches of anchor that start at or
// after offset from, at the first level that has any.
func findAnchor(src string, lines []int, anchor string, from int) []match {
	if anchor == "" {
		return nil
	}
	var ms []match
	for off := from; ; {
		j := strings.Index(src[off:], anchor)
		if j < 0 {
			break
		}
		start := off + j
		end := start + len(anchor)
		off = end
		m := match{start: start, end: end, lines: isLineStart(src, start) && isLineEnd(src, end)}
		if !m.lines && !strings.Contains(strings.TrimSuffix(anchor, "\n"), "\n") {
			m = wholeLine(src, m)
		}
		ms = append(ms, m)
	}
	if len(ms) > 0 {
		return ms
	}
	alines := strings.Split(anchor, "\n")
	withNL := strings.HasSuffix(anchor, "\n")
	if withNL {
		alines = alines[:len(alines)-1]
	}
	if isBlank(alines) {
		return nil
	}
	for _, indent := range []bool{false, true} {
		ms = findLines(src, lines, alines, withNL, indent, from)
		if len(ms) > 0 {
			return ms
		}
	}
	return nil
}

// findLines matches alines against whole source lines starting at or after
// offset from, ignoring trailing
// whitespace and, when indent, a common leading-whitespace baseline.
func findLines(src string, lines []int, alines []string, withNL, indent bool, from int) []match {
	k := len(alines)
	want := make([]string, k)
	aBase := ""
	if indent {
		aBase = baseline(alines)
	}
	for j, l := range alines {
		want[j] = strings.TrimPrefix(trimRight(l), aBase)
	}
	var ms []match
	window := make([]string, k)
	first, _ := slices.BinarySearch(lines, from)
	for i := first; i+k <= len(lines); i++ {
		for j := range k {
			window[j] = lineText(src, lines, i+j)
		}
		sBase := ""
		if indent {
			sBase = baseline(window)
		}
		ok := true
		for j := range k {
			got := trimRight(window[j])
			if indent && !strings.HasPrefix(got, sBase) && got != "" {
				ok = false
				break
			}
			if strings.TrimPrefix(got, sBase) != want[j] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		start := lines[i]
		end := start + len(window[0])
		if last := i + k - 1; last > i {
			end = lines[last] + len(window[k-1])
		}
		if withNL && end < len(src) && src[end] == '\n' {
			end++
		}
		m := match{start: start, end: end, lines: true}
		if indent && aBase != sBase {
			m.reindent = func(s string) string { return reindent(s, aBase, sBase) }
		}
		ms = append(ms, m)
		i += k - 1
	}
	return ms
}

// reindent moves text from the anchor's indentation to the file's: a line
// starting with from gets to instead; other non-blank lines get to in front
// of their text; blank lines stay empty.
func reindent(text, from, to string) string {
	ls := strings.Split(text, "\n")
	for j, l := range ls {
		switch {
		case strings.TrimSpace(l) == "":
			ls[j] = ""
		case strings.HasPrefix(l, from):
			ls[j] = to + l[len(from):]
		default:
			ls[j] = to + strings.TrimLeft(l, " \t")
		}
	}
	return strings.Join(ls, "\n")
}

// baseline is the longest leading whitespace common to the non-blank lines.
func baseline(ls []string) string {
	base, set := "", false
	for _, l := range ls {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ws := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if !set {
			base, set = ws, true
			continue
		}
		n := 0
		for n < len(base) && n < len(ws) && base[n] == ws[n] {
			n++
		}
		base = base[:n]
	}
	return base
}

func trimRight(s string) string { return strings.TrimRight(s, " \t\r") }

func isBlank(ls []string) bool {
	for _, l := range ls {
		if strings.TrimSpace(l) != "" {
			return false
		}
	}
	return true
}

// splitLines returns the offset where each line of src starts.
func splitLines(src string) []int {
	starts := make([]int, 1, strings.Count(src, "\n")+1)
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' && i+1 < len(src) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// lineText is line i of src without its newline.
func lineText(src string, lines []int, i int) string {
	end := len(src)
	if i+1 < len(lines) {
		end = lines[i+1] - 1
	} else if strings.HasSuffix(src, "\n") {
		end--
	}
	return src[lines[i]:end]
}

// lineOf is the 1-based line of offset off (one past the last line for the
// end of a source that ends with a newline).
func lineOf(src string, lines []int, off int) int {
	if off == len(src) && strings.HasSuffix(src, "\n") {
		return len(lines) + 1
	}
	n, _ := slices.BinarySearch(lines, off+1)
	return max(n, 1)
}

func isLineStart(src string, off int) bool { return off == 0 || src[off-1] == '\n' }

func isLineEnd(src string, off int) bool {
	return off == len(src) || src[off] == '\n' || off > 0 && src[off-1] == '\n'
}

// countLines counts the lines s spans; a final line without a newline
// counts.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// quote quotes an anchor for a message, shortened past 120 bytes.
func quote(s string) string {
	if len(s) > 120 {
		return strconv.Quote(s[:120]) + "..."
	}
	return strconv.Quote(s)
}
