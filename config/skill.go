package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Skill is an Agent Skills directory: assistants/<id>/skills/<name>/ with
// SKILL.md and optional scripts/, references/ and assets/.
type Skill struct {
	Name          string            `json:"name"`
	Description   string            `json:"description"`
	License       string            `json:"license,omitempty"`
	Compatibility string            `json:"compatibility,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// AllowedTools is allowed-tools split into tool patterns
	// ("Bash(git diff:*)" stays one entry).
	AllowedTools []string `json:"allowed_tools,omitempty"`
	// Dir is the skill's directory (absolute); the middleware copies it
	// into the run's HOME (.claude/skills/ there, where the CLI reads user
	// skills), outside the workspace the agent can write.
	Dir string `json:"-"`
	// File is SKILL.md's path relative to the gateway directory.
	File string `json:"file"`
	// Scripts, References and Assets tell which optional directories exist.
	Scripts    bool `json:"scripts,omitempty"`
	References bool `json:"references,omitempty"`
	Assets     bool `json:"assets,omitempty"`
}

// Limits of the Agent Skills standard.
const (
	maxSkillName          = 64
	maxSkillDescription   = 1024
	maxSkillCompatibility = 500
)

var skillNameRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// skillFields are the standard's front matter fields; claudeSkillFields
// are Claude Code's extensions, accepted without a warning.
var (
	skillFields       = []string{"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
	claudeSkillFields = []string{"argument-hint", "disable-model-invocation", "user-invocable", "model", "effort", "context", "agent", "hooks"}
)

// loadSkills discovers assistants/<id>/skills/*/SKILL.md. Problems go to
// ps; a refused skill is left out with a "skill excluded" error.
func loadSkills(root, relDir string, ps *problems) []Skill {
	dir := filepath.Join(root, filepath.FromSlash(relDir))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // no skills/ directory: no skills
	}
	var out []Skill
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		rel := relDir + "/" + name
		if !e.IsDir() {
			ps.add(Problem{File: rel, Message: "not a skill directory; ignored", Hint: "put each skill in its own directory: skills/<name>/SKILL.md", Severity: SeverityWarning})
			continue
		}
		if s, ok := loadSkill(root, rel, name, ps); ok {
			out = append(out, s)
		}
	}
	return out
}

func loadSkill(root, relDir, dirName string, ps *problems) (Skill, bool) {
	rel := relDir + "/SKILL.md"
	d := newDecoder(rel, ps)
	excluded := func(n *node, path, hint, format string, args ...any) {
		d.errorf(n, path, hint, "skill excluded: "+format, args...)
	}
	dir := filepath.Join(root, filepath.FromSlash(relDir))
	src, err := os.ReadFile(filepath.Join(dir, "SKILL.md"))
	if err != nil {
		d.file = relDir
		excluded(nil, "", "add SKILL.md with name and description in YAML front matter", "no SKILL.md (%s)", pathErr(err))
		return Skill{}, false
	}
	front, ok := frontMatter(src)
	if !ok {
		excluded(nil, "", "start the file with a --- line, then name: and description:, then a --- line", "no YAML front matter")
		return Skill{}, false
	}
	n, perr := parseYAML(front, 1)
	if perr != nil {
		d.syntax(perr, "skill excluded: malformed front matter")
		return Skill{}, false
	}
	if n.kind != kindObject {
		excluded(n, "", "write name: and description: fields between the --- lines", "front matter is %s, want fields", n.kind)
		return Skill{}, false
	}
	s := Skill{Dir: dir, File: rel}
	known := append(append([]string(nil), skillFields...), claudeSkillFields...)
	for _, m := range n.members {
		if !contains(known, m.key) {
			hint := suggest(m.key, known)
			if hint == "" {
				hint = "move it under metadata: if it is yours"
			}
			d.warnf(m.val, m.key, hint, "unknown field")
		}
	}
	// name: Claude Code falls back to the directory name, but refuses a
	// name that differs from it.
	s.Name = dirName
	if v := n.get("name"); v == nil {
		d.warnf(n, "name", "add name: "+dirName, "missing; the directory name is used")
	} else if name, ok := scalarString(v); !ok {
		excluded(v, "name", "write name: "+dirName, "name is %s, want a string", v.kind)
		return Skill{}, false
	} else if name != dirName {
		excluded(v, "name", "rename the directory or the skill so both are "+quoteList([]string{name}), "name %q does not match its directory %q", name, dirName)
		return Skill{}, false
	}
	if !skillNameRE.MatchString(s.Name) || len(s.Name) > maxSkillName {
		d.warnf(n.get("name"), "name", "use 1-64 lowercase letters, digits and single hyphens, e.g. code-review", "%q breaks the Agent Skills naming rule", s.Name)
	}
	dn := n.get("description")
	if dn == nil {
		excluded(n, "description", "add description: what the skill does and when to use it", "description is missing")
		return Skill{}, false
	}
	desc, ok := scalarString(dn)
	if !ok || strings.TrimSpace(desc) == "" {
		excluded(dn, "description", "write what the skill does and when to use it", "description is empty or not text")
		return Skill{}, false
	}
	s.Description = strings.TrimSpace(desc)
	if c := utf8.RuneCountInString(desc); c > maxSkillDescription {
		d.warnf(dn, "description", "shorten it to 1024 characters; put details in the body", "%d characters, the standard allows %d", c, maxSkillDescription)
	}
	if v := n.get("license"); v != nil {
		if s.License, ok = scalarString(v); !ok {
			d.warnf(v, "license", "write a license name, e.g. Apache-2.0", "license is %s, want text", v.kind)
		}
	}
	if v := n.get("compatibility"); v != nil {
		s.Compatibility, ok = scalarString(v)
		switch c := utf8.RuneCountInString(s.Compatibility); {
		case !ok:
			d.warnf(v, "compatibility", "write the requirements as text", "compatibility is %s, want text", v.kind)
		case c > maxSkillCompatibility:
			d.warnf(v, "compatibility", "shorten it to 500 characters", "%d characters, the standard allows %d", c, maxSkillCompatibility)
		}
	}
	if v := n.get("metadata"); v != nil {
		s.Metadata = skillMetadata(d, v)
	}
	if v := n.get("allowed-tools"); v != nil {
		s.AllowedTools = allowedTools(d, v)
	}
	warnSkillLinks(d, relDir, dir)
	for _, sub := range []struct {
		name string
		ptr  *bool
	}{{"scripts", &s.Scripts}, {"references", &s.References}, {"assets", &s.Assets}} {
		if fi, err := os.Stat(filepath.Join(dir, sub.name)); err == nil && fi.IsDir() {
			*sub.ptr = true
		}
	}
	return s, true
}

// frontMatter returns the YAML between a leading --- line and the next
// --- line.
func frontMatter(src []byte) ([]byte, bool) {
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	src = bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
	if !bytes.HasPrefix(src, []byte("---\n")) {
		return nil, false
	}
	rest := src[len("---\n"):]
	for off := 0; off <= len(rest); {
		end := bytes.IndexByte(rest[off:], '\n')
		line := rest[off:]
		if end >= 0 {
			line = rest[off : off+end]
		}
		if strings.TrimRight(string(line), " \t") == "---" {
			return rest[:off], true
		}
		if end < 0 {
			break
		}
		off += end + 1
	}
	return nil, false
}

// scalarString accepts text and the scalars YAML reads as numbers or
// booleans (version: 1.0), as their literal text.
func scalarString(n *node) (string, bool) {
	switch n.kind {
	case kindString, kindNumber:
		return n.str, true
	case kindBool:
		return describe(n), true
	}
	return "", false
}

func skillMetadata(d *decoder, n *node) map[string]string {
	if n.kind != kindObject {
		d.warnf(n, "metadata", "write key: value pairs", "metadata is %s, want a map; ignored", n.kind)
		return nil
	}
	out := map[string]string{}
	for _, m := range n.members {
		v, ok := scalarString(m.val)
		if !ok || m.val.kind != kindString {
			d.warnf(m.val, "metadata."+m.key, "quote the value, e.g. \"1.0\"", "the standard wants a string here")
		}
		if ok {
			out[m.key] = v
		}
	}
	return out
}

// allowedTools splits the standard's space-separated string, keeping
// "Bash(git diff:*)" whole; a YAML list is accepted with a warning.
func allowedTools(d *decoder, n *node) []string {
	switch n.kind {
	case kindString:
		return splitTools(n.str)
	case kindArray:
		var out []string
		for _, it := range n.items {
			if s, ok := scalarString(it); ok {
				out = append(out, s)
			}
		}
		d.warnf(n, "allowed-tools", "write one space-separated string, e.g. allowed-tools: Read Bash(git:*)", "a list; the standard wants a string")
		return out
	}
	d.warnf(n, "allowed-tools", "write one space-separated string, e.g. allowed-tools: Read Bash(git:*)", "allowed-tools is %s; ignored", n.kind)
	return nil
}

func splitTools(s string) []string {
	var out []string
	depth, start := 0, -1
	for i, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case (r == ' ' || r == '\t' || r == '\n' || r == ',') && depth == 0:
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// Bounds of SkillFiles: skills are copied into every workspace.
const (
	maxSkillFiles      = 1000
	maxSkillFilesBytes = 32 << 20
)

// ErrSkillsTooLarge is returned by SkillFiles past its bounds.
var ErrSkillsTooLarge = errors.New("skills too large")

// walkSkill visits the regular files below a skill directory and reports
// every other entry (symlink, device, socket, FIFO) to skipped. It never
// follows a symlink: a link could copy host files into a sandbox.
func walkSkill(dir string, file func(rel, path string, size int64) error, skipped func(rel string)) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case e.IsDir():
			return nil
		case !e.Type().IsRegular():
			if skipped != nil {
				skipped(rel)
			}
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		return file(rel, p, info.Size())
	})
}

// SkillFiles returns the files of the assistant's skills by relative name
// prefix/<skill>/<path> (prefix ".claude/skills" for Claude Code), for
// the middleware to place in the workspace. Only regular files are read;
// symlinks and special files are skipped (Load warns about them). More
// than 1000 files or 32 MiB in all is an error wrapping ErrSkillsTooLarge.
func (a *Assistant) SkillFiles(prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	var total int64
	for _, s := range a.Skills {
		err := walkSkill(s.Dir, func(rel, p string, size int64) error {
			total += size
			if len(out) >= maxSkillFiles || total > maxSkillFilesBytes {
				return fmt.Errorf("%w: assistant %q has more than %d files or %d MiB of skills; trim skills/",
					ErrSkillsTooLarge, a.ID, maxSkillFiles, maxSkillFilesBytes>>20)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read skill %s: %w", s.Name, err)
			}
			out[path.Join(prefix, s.Name, rel)] = b
			return nil
		}, nil)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// warnSkillLinks reports entries of a skill that SkillFiles skips.
func warnSkillLinks(d *decoder, relDir, dir string) {
	_ = walkSkill(dir, func(string, string, int64) error { return nil }, func(rel string) {
		d.ps.add(Problem{File: relDir + "/" + rel, Message: "not a regular file (symlink or special file); it is not copied into the sandbox",
			Hint: "replace it with a regular file", Severity: SeverityWarning})
	})
}
