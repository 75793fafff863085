// Package folder writes the output folder of lcc compile -o whole and seals it
// with a manifest that every loader verifies (issue #23: two compiles into one
// folder left one model's graph beside another's weights, and a reused folder
// kept stale kernels).
//
// Invariants:
//   - A folder is written into a sibling temporary folder (DIR.tmp-*, on the same
//     file system) and swapped in by renames: readers see the old folder or the new
//     one, never a mix, and a failed write leaves the old folder as it was.
//   - Writers of one folder take turns: an exclusive flock on DIR.lock.
//   - Nothing stale survives: the new folder holds exactly what the compile wrote.
//   - lcc only replaces what it wrote: an existing folder that is not empty and has
//     no manifest is refused, so a mistyped -o never deletes a user's files.
//   - manifest.json, written last, records the program hash and every file with its
//     size and sha256. Verify checks a folder against it: an edited, missing or
//     foreign file is an error naming the file.
package folder

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/lcc-dev/lcc/internal/userfile"
)

// ManifestName is the manifest's file name in a folder.
const ManifestName = "manifest.json"

// Manifest is the one record of what a compiled folder's program is.
type Manifest struct {
	// Program is the program hash of the compile that wrote the folder.
	Program string `json:"program"`
	// Files lists every other file of the folder, by slash-separated path
	// relative to it, in path order.
	Files []File `json:"files"`
}

// File is one file of a folder.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Write replaces dir with a folder that fill writes (it is given the folder to
// write into) and seals it with a manifest naming program. See the package
// invariants.
func Write(dir, program string, fill func(tmp string) error) (err error) {
	// The folder is replaced by renames in its parent, so it must have one:
	// "-o ." names the current folder by its absolute path.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("-o %s: %w", dir, err)
	}
	if filepath.Dir(abs) == abs {
		return fmt.Errorf("-o %s: the root folder cannot be an output folder", dir)
	}
	name := dir // as the user spelled it, for messages
	dir = abs
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("-o %s: %w", name, err)
	}
	unlock, err := lock(dir + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if err := replaceable(dir, name); err != nil {
		return err
	}
	removeLeftovers(parent, base)
	tmp, err := os.MkdirTemp(parent, base+".tmp-")
	if err != nil {
		return fmt.Errorf("-o %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := seal(tmp, program); err != nil {
		return err
	}
	if err := swap(tmp, dir); err != nil {
		return fmt.Errorf("-o %s: %w", name, err)
	}
	return nil
}

// lock takes the exclusive lock of path, waiting for another writer to finish.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("-o: cannot lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("-o: cannot lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// replaceable checks that dir (spelled name by the user) is absent, an empty
// folder or a folder lcc wrote.
func replaceable(dir, name string) error {
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("-o %s: %w", name, err)
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("-o %s: is a symbolic link; give the folder it points to", name)
	case !st.IsDir():
		return fmt.Errorf("-o %s: exists and is not a folder", name)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("-o %s: %w", name, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("-o %s: the folder exists, is not empty and has no %s, so lcc did not write it "+
			"(or wrote it before it kept manifests); lcc replaces only its own output folders: remove it "+
			"or give another -o", name, ManifestName)
	}
	return nil
}

// removeLeftovers removes the temporary folders of writes of dir that died
// (the caller holds dir's lock, so no live write owns them).
func removeLeftovers(parent, base string) {
	for _, pat := range []string{base + ".tmp-*", base + ".old-*"} {
		old, _ := filepath.Glob(filepath.Join(parent, pat))
		for _, p := range old {
			os.RemoveAll(p)
		}
	}
}

// swap puts the folder tmp in dir's place: the old dir is renamed aside, tmp
// renamed in, and the old one removed.
func swap(tmp, dir string) error {
	var suffix [6]byte
	rand.Read(suffix[:])
	aside := dir + ".old-" + hex.EncodeToString(suffix[:])
	hadOld := true
	if err := os.Rename(dir, aside); errors.Is(err, fs.ErrNotExist) {
		hadOld = false
	} else if err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if hadOld {
			os.Rename(aside, dir)
		}
		return err
	}
	syncDir(filepath.Dir(dir))
	if hadOld {
		return os.RemoveAll(aside)
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// seal writes dir's manifest: every file but the manifest, hashed.
func seal(dir, program string) error {
	m := Manifest{Program: program, Files: []File{}}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == ManifestName {
			return nil
		}
		f, err := hashFile(path)
		if err != nil {
			return err
		}
		f.Path = filepath.ToSlash(rel)
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	js, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, ManifestName), append(js, '\n'))
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// hashFile reads a regular file's size and sha256 (userfile: a named pipe in
// the folder is refused, not waited on).
func hashFile(path string) (File, error) {
	f, err := userfile.Open(path)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
