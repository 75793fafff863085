package folder

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lcc-dev/lcc/internal/userfile"
)

// ErrNoManifest is Read's error for a folder without a manifest.
var ErrNoManifest = errors.New("no " + ManifestName)

// maxManifest bounds the manifest a loader reads (a program of a million
// kernels lists about 100 MB; anything larger is not lcc's).
const maxManifest = 256 << 20

// Read reads and checks dir's manifest (a file from the user, so untrusted:
// every path must be a plain relative path inside dir, listed once).
func Read(dir string) (*Manifest, error) {
	name := filepath.Join(dir, ManifestName)
	f, err := userfile.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxManifest {
		return nil, fmt.Errorf("%s: larger than %d MiB, not an lcc manifest", name, maxManifest>>20)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if m.Program == "" {
		return nil, fmt.Errorf("%s: no program hash", name)
	}
	seen := map[string]bool{}
	for _, fl := range m.Files {
		p := fl.Path
		if p == "" || p != path.Clean(p) || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") ||
			strings.Contains(p, "\\") || p == ManifestName {
			return nil, fmt.Errorf("%s: file path %q is not a plain path inside the folder", name, p)
		}
		if seen[p] {
			return nil, fmt.Errorf("%s: lists %q twice", name, p)
		}
		seen[p] = true
	}
	return &m, nil
}

// Verify checks dir against its manifest: every listed file is there, a
// regular file of the recorded size and sha256, and no file the manifest does
// not list is in a place only the compile writes. owned names those places: a
// top-level file name ("graph.lcc"), or a folder with a trailing slash
// ("kernels/") for everything under it; other files (a loss plot or metrics a
// user keeps beside the program) are not checked. The error names the file.
func Verify(dir string, owned []string) error {
	m, err := Read(dir)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, want := range m.Files {
		listed[want.Path] = true
		p := filepath.Join(dir, filepath.FromSlash(want.Path))
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: missing (%s lists it)", p, ManifestName)
		}
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file (%s lists a file)", p, ManifestName)
		}
		if st.Size() != want.Size {
			return fmt.Errorf("%s: edited since compile (%d bytes, %s records %d)", p, st.Size(),
				ManifestName, want.Size)
		}
		got, err := hashFile(p)
		if err != nil {
			return err
		}
		if got.SHA256 != want.SHA256 {
			return fmt.Errorf("%s: edited since compile (sha256 mismatch with %s)", p, ManifestName)
		}
	}
	for _, o := range owned {
		if sub, isDir := strings.CutSuffix(o, "/"); isDir {
			err = filepath.WalkDir(filepath.Join(dir, sub), func(p string, d fs.DirEntry, err error) error {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				return unlisted(dir, listed, filepath.ToSlash(rel))
			})
		} else if _, statErr := os.Lstat(filepath.Join(dir, o)); statErr == nil {
			err = unlisted(dir, listed, o)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unlisted fails for a file rel of dir that the manifest does not list.
func unlisted(dir string, listed map[string]bool, rel string) error {
	if listed[rel] {
		return nil
	}
	return fmt.Errorf("%s: not written by the compile that wrote %s (a stale or foreign file; "+
		"compile again into an empty folder)", filepath.Join(dir, filepath.FromSlash(rel)), ManifestName)
}
