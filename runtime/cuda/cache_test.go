package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeCompiler stands in for NVRTC: the image is a function of the inputs, and
// compiles are counted.
type fakeCompiler struct{ calls atomic.Int64 }

func (f *fakeCompiler) compile(src, name, arch string, opts []string,
	cubin bool) ([]byte, string, error) {
	f.calls.Add(1)
	if strings.Contains(src, "syntax error") {
		return nil, "k.cu(1): error: syntax error", &CompileError{Name: name, Arch: arch,
			Log: "k.cu(1): error: syntax error", Err: errors.New("NVRTC_ERROR_COMPILATION")}
	}
	img := fmt.Sprintf("image of %s for %s %q cubin=%v: %s", name, arch, opts, cubin, src)
	return []byte(img), "", nil
}

// newFakeCache opens a cache in a fresh directory with a fake compiler.
func newFakeCache(t *testing.T, dir string) (*Cache, *fakeCompiler) {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "kernels")
	}
	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCompiler{}
	c.compile = f.compile
	c.version = func(string) (string, error) { return "99.9", nil }
	return c, f
}

func TestCacheDirCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "kernels")
	if _, err := OpenCache(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o700 {
			t.Errorf("%s created with mode %04o, want 0700", d, perm)
		}
	}
}

func TestCacheDirPermissions(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o700, true},
		{0o750, true}, // readable by the group, but only the owner can plant entries
		{0o777, false},
		{0o770, false},
		{0o702, false},
	} {
		t.Run(fmt.Sprintf("%04o", tc.mode), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := OpenCache(dir)
			if tc.ok && err != nil {
				t.Errorf("OpenCache refused mode %04o: %v", tc.mode, err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "writable")) {
				t.Errorf("OpenCache(mode %04o) = %v, want a group- or world-writable error", tc.mode, err)
			}
		})
	}
}

func TestCacheDirOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: giving a directory to another user needs root")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Skipf("skipping: chown failed: %v", err)
	}
	_, err := OpenCache(dir)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 4242") {
		t.Errorf("OpenCache(dir of uid 4242) = %v, want an ownership error", err)
	}
}

func TestCacheDirNotDir(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCache(f); err == nil {
		t.Error("OpenCache on a plain file succeeded")
	}
}

func TestCacheDirEnv(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "env-kernels")
	t.Setenv(EnvCacheDir, dir)
	c, err := OpenCache("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir() != dir {
		t.Errorf("Dir() = %q, want %q from %s", c.Dir(), dir, EnvCacheDir)
	}
}

func TestCacheKeyDeterministic(t *testing.T) {
	base := func() Key {
		return CacheKey("src", "k.cu", "11.8", "sm_90", []string{"-O3", "-lineinfo"})
	}
	if base() != base() {
		t.Fatal("equal inputs gave different keys")
	}
	// A golden value: the key must not change between processes, machines or lcc
	// versions without a deliberate change of the "lcc-kernel-cache-v1" tag.
	const golden = "11674371ce40a4aced402fc03a4ead5db710bd6a6b83bbe33a7fb39263222d87"
	if got := base().String(); got != golden {
		t.Errorf("key = %s, want %s", got, golden)
	}
	others := map[string]Key{
		"source":        CacheKey("src2", "k.cu", "11.8", "sm_90", []string{"-O3", "-lineinfo"}),
		"name":          CacheKey("src", "j.cu", "11.8", "sm_90", []string{"-O3", "-lineinfo"}),
		"version":       CacheKey("src", "k.cu", "12.4", "sm_90", []string{"-O3", "-lineinfo"}),
		"arch":          CacheKey("src", "k.cu", "11.8", "sm_80", []string{"-O3", "-lineinfo"}),
		"option order":  CacheKey("src", "k.cu", "11.8", "sm_90", []string{"-lineinfo", "-O3"}),
		"option split":  CacheKey("src", "k.cu", "11.8", "sm_90", []string{"-O3-lineinfo"}),
		"fewer options": CacheKey("src", "k.cu", "11.8", "sm_90", []string{"-O3"}),
		"field shift":   CacheKey("srck.cu", "", "11.8", "sm_90", []string{"-O3", "-lineinfo"}),
	}
	for what, k := range others {
		if k == base() {
			t.Errorf("changing the %s did not change the key", what)
		}
	}
}

func TestCacheHitMissAndPersistence(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kernels")
	c, f := newFakeCache(t, dir)
	img1, err := c.Get("src", "k.cu", "compute_80", nil)
	if err != nil {
		t.Fatal(err)
	}
	img2, err := c.Get("src", "k.cu", "compute_80", nil)
	if err != nil || !bytes.Equal(img1, img2) {
		t.Fatalf("second Get = %q, %v; want %q", img2, err, img1)
	}
	if got := c.Stats(); got != (CacheStats{Hits: 1, Misses: 1}) || f.calls.Load() != 1 {
		t.Errorf("stats %+v, %d compiles; want 1 hit, 1 miss, 1 compile", got, f.calls.Load())
	}
	// A second Cache on the same directory, as another process would, reads the
	// entry from disk.
	c2, f2 := newFakeCache(t, dir)
	img3, err := c2.Get("src", "k.cu", "compute_80", nil)
	if err != nil || !bytes.Equal(img1, img3) || f2.calls.Load() != 0 {
		t.Errorf("fresh cache: %q, %v, %d compiles; want the stored image and no compile",
			img3, err, f2.calls.Load())
	}
	// sm_XX asks for a cubin, compute_XX for PTX.
	img4, _ := c.Get("src", "k.cu", "sm_90", nil)
	if !bytes.Contains(img4, []byte("cubin=true")) || !bytes.Contains(img1, []byte("cubin=false")) {
		t.Errorf("image kinds: compute_80 %q, sm_90 %q", img1, img4)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
		if fi, _ := e.Info(); fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("entry %s has mode %04o, want owner-only", e.Name(), fi.Mode().Perm())
		}
	}
}

// entryPath returns the file of the only entry in c.
func entryPath(t *testing.T, c *Cache) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(c.Dir(), "*"+entrySuffix))
	if err != nil || len(m) != 1 {
		t.Fatalf("entries %v, %v; want exactly one", m, err)
	}
	return m[0]
}

// TestCacheCorruption damages the entry on disk in several ways; each time a fresh
// Cache must detect it, remove it, rebuild the same image and count a rebuild.
func TestCacheCorruption(t *testing.T) {
	damage := map[string]func([]byte) []byte{
		"flip payload byte": func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b },
		"flip header byte":  func(b []byte) []byte { b[len(entryMagic)+40] ^= 1; return b },
		"flip magic":        func(b []byte) []byte { b[0] = 'X'; return b },
		"truncate payload":  func(b []byte) []byte { return b[:len(b)-5] },
		"truncate header":   func(b []byte) []byte { return b[:20] },
		"empty":             func(b []byte) []byte { return nil },
		"extra bytes":       func(b []byte) []byte { return append(b, 'x') },
	}
	for what, f := range damage {
		t.Run(what, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "kernels")
			c, _ := newFakeCache(t, dir)
			want, err := c.Get("src", "k.cu", "compute_80", nil)
			if err != nil {
				t.Fatal(err)
			}
			path := entryPath(t, c)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, f(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			c2, comp := newFakeCache(t, dir)
			got, err := c2.Get("src", "k.cu", "compute_80", nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("after damage: %q, %v; want %q", got, err, want)
			}
			if s := c2.Stats(); s.Rebuilds != 1 || comp.calls.Load() != 1 {
				t.Errorf("stats %+v, %d compiles; want 1 rebuild, 1 compile", s, comp.calls.Load())
			}
			// The rebuilt entry is whole again.
			raw2, _ := os.ReadFile(path)
			if _, err := decodeEntry(CacheKey("src", "k.cu", "99.9", "compute_80", nil), raw2); err != nil {
				t.Errorf("rebuilt entry: %v", err)
			}
		})
	}
}

// TestCacheEntryOtherKey checks that an intact entry renamed onto another key's file
// is rejected.
func TestCacheEntryOtherKey(t *testing.T) {
	k1, k2 := CacheKey("a", "", "", "", nil), CacheKey("b", "", "", "", nil)
	if _, err := decodeEntry(k2, encodeEntry(k1, []byte("payload"))); err == nil {
		t.Error("an entry of another key was accepted")
	}
	img, err := decodeEntry(k1, encodeEntry(k1, []byte("payload")))
	if err != nil || string(img) != "payload" {
		t.Errorf("round trip = %q, %v", img, err)
	}
}

// TestCacheConcurrent checks that goroutines asking for one kernel at once cause
// one compile.
func TestCacheConcurrent(t *testing.T) {
	c, f := newFakeCache(t, "")
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get("src", "k.cu", "compute_80", nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d compiles, want 1", n)
	}
}

// TestCacheCompileErrorSavesSource checks that a failing kernel's source lands in
// the cache directory and the error names it; failures are not cached.
func TestCacheCompileErrorSavesSource(t *testing.T) {
	c, f := newFakeCache(t, "")
	src := "syntax error here"
	_, err := c.Get(src, "bad/kernel.cu", "compute_80", nil)
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CompileError", err)
	}
	if filepath.Dir(ce.SourcePath) != c.Dir() || !strings.Contains(err.Error(), ce.SourcePath) {
		t.Errorf("source saved at %q, want it in %s and named in %q", ce.SourcePath, c.Dir(), err)
	}
	if saved, _ := os.ReadFile(ce.SourcePath); string(saved) != src {
		t.Errorf("saved source = %q, want %q", saved, src)
	}
	c.Get(src, "bad/kernel.cu", "compute_80", nil)
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d compiles after two failing Gets, want 2 (errors are not cached)", n)
	}
}

// TestCacheNVRTC runs the cache over the real NVRTC.
func TestCacheNVRTC(t *testing.T) {
	needNVRTC(t)
	c, err := OpenCache(filepath.Join(t.TempDir(), "kernels"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"compute_80", "sm_90"} {
		img, err := c.Get(saxpySrc, "saxpy.cu", arch, nil)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		isELF := bytes.HasPrefix(img, []byte("\x7fELF"))
		if isELF != (arch == "sm_90") {
			t.Errorf("%s: image is ELF = %v", arch, isELF)
		}
	}
	if _, err := c.Get(saxpySrc, "saxpy.cu", "compute_80", nil); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Misses != 2 || s.Hits != 1 {
		t.Errorf("stats %+v, want 2 misses and 1 hit", s)
	}
}
