package executor

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
)

// homeFilesTimeout bounds the command that unpacks PlaceHomeFiles' files.
const homeFilesTimeout = time.Minute

// PlaceHomeFiles writes files (relative names, e.g.
// ".claude/skills/x/SKILL.md") below dir, an absolute directory inside sb's
// container such as the run's HOME, by unpacking a tar archive with the
// container's sh and tar as the sandbox user. It is for files the agent
// must read but must not be able to leave for a later run: HOME is a tmpfs
// that lives as long as the container, so whatever the agent changes there
// is gone with it, unlike the workspace. Call it before anything of the
// agent runs in the container. Names must be relative and must not climb
// with ".."; otherwise the error wraps ErrInvalid.
func PlaceHomeFiles(ctx context.Context, sb Sandbox, dir string, files map[string][]byte) error {
	if len(files) == 0 {
		return nil
	}
	if !path.IsAbs(dir) || path.Clean(dir) == "/" {
		return fmt.Errorf("place home files: directory %q must be an absolute path other than / inside the container: %w", dir, ErrInvalid)
	}
	archive, err := homeArchive(files)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	res, err := sb.Exec(ctx, &Cmd{
		// umask 022: files 0644, directories 0755, whatever the image sets.
		Args:    []string{"sh", "-c", `umask 022 && mkdir -p -- "$1" && exec tar -x -f - -C "$1"`, "sh", path.Clean(dir)},
		Stdin:   bytes.NewReader(archive),
		Stderr:  &stderr,
		Timeout: homeFilesTimeout,
	})
	if err != nil {
		return fmt.Errorf("place home files in %s: %w", dir, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("place home files in %s: tar exited with code %d (%s); the image needs sh and tar on its PATH",
			dir, res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// homeArchive is a tar archive of files: each directory once, then the
// files, all owned by nobody in particular (the unpacking user keeps them).
func homeArchive(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs, regular := map[string]bool{}, map[string]bool{}
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		parts, err := splitName(name)
		if err != nil || len(parts) == 0 || path.IsAbs(name) {
			return nil, fmt.Errorf("place home files: %q is not a relative file name; name files like .claude/skills/x/SKILL.md: %w", name, ErrInvalid)
		}
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if regular[d] {
				return nil, fmt.Errorf("place home files: %q is both a file and a directory: %w", d, ErrInvalid)
			}
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now}); err != nil {
				return nil, fmt.Errorf("place home files: %w", err)
			}
		}
		clean := strings.Join(parts, "/")
		if dirs[clean] {
			return nil, fmt.Errorf("place home files: %q is both a file and a directory: %w", clean, ErrInvalid)
		}
		regular[clean] = true
		data := files[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: clean, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
			return nil, fmt.Errorf("place home files: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("place home files: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("place home files: %w", err)
	}
	return buf.Bytes(), nil
}
