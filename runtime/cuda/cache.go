package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/internal/userfile"
)

// Cache is the on-disk kernel cache: compiled images keyed by sha256 of the source,
// program name, NVRTC version, arch and options, in a directory private to the user.
// It is safe for concurrent use by goroutines and by processes sharing the
// directory: a kernel wanted by several goroutines at once is compiled once, and
// entries appear by atomic rename. See the package comment for its invariants.
type Cache struct {
	dir string

	mu       sync.Mutex
	mem      map[Key][]byte    // images already read or built by this process
	inflight map[Key]*inflight // compiles in progress

	hits, misses, rebuilds atomic.Int64

	// compile and version stand in for NVRTC (the one NVRTCFor picks for the
	// architecture); tests replace them to run without it.
	compile func(src, name, arch string, opts []string, cubin bool) ([]byte, string, error)
	version func(arch string) (string, error)
}

// inflight is a compile other goroutines wait for.
type inflight struct {
	done  chan struct{}
	image []byte
	err   error
}

// Key identifies a cache entry.
type Key [sha256.Size]byte

// String returns the key in hex, as used in entry file names.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// CacheKey returns the key of a kernel: sha256 over the length-prefixed source,
// program name (it appears in PTX line info), NVRTC version, arch and each option,
// so that no two different inputs can be spelt the same. Equal inputs give equal
// keys in every process and on every machine.
func CacheKey(src, name, nvrtcVersion, arch string, opts []string) Key {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("lcc-kernel-cache-v1")
	put(src)
	put(name)
	put(nvrtcVersion)
	put(arch)
	put(fmt.Sprint(len(opts)))
	for _, o := range opts {
		put(o)
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// CacheStats counts what a Cache did since it was opened.
type CacheStats struct {
	Hits     int64 // served from memory or from a valid entry on disk
	Misses   int64 // compiled because no entry existed
	Rebuilds int64 // compiled because the entry on disk was corrupt or truncated
}

// DefaultCacheDir returns $LCC_CACHE_DIR, or lcc/kernels under os.UserCacheDir
// (usually ~/.cache/lcc/kernels).
func DefaultCacheDir() (string, error) {
	if d := readConfig().cacheDir; d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: kernel cache: no user cache directory (%v); set %s",
			err, EnvCacheDir)
	}
	return filepath.Join(base, "lcc", "kernels"), nil
}

// OpenCache opens the kernel cache in dir, or in DefaultCacheDir if dir is "". A
// missing directory is created with mode 0700. A directory that is group- or
// world-writable or owned by another user is refused: anyone who can write there
// could plant code that lcc would run on the GPU.
func OpenCache(dir string) (*Cache, error) {
	if dir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cuda: kernel cache: %w", err)
	}
	if err := checkCacheDir(dir); err != nil {
		return nil, err
	}
	return &Cache{
		dir:      dir,
		mem:      map[Key][]byte{},
		inflight: map[Key]*inflight{},
		compile:  compileFor,
		version:  versionFor,
	}, nil
}

// compileFor compiles with the NVRTC that NVRTCFor picks for arch: the default
// one, or LCC_NVRTC12's for sm_90a when the default is older than 12.0.
func compileFor(src, name, arch string, opts []string, cubin bool) ([]byte, string, error) {
	n, err := NVRTCFor(arch)
	if err != nil {
		return nil, "", err
	}
	return n.compile(src, name, arch, opts, cubin)
}

// versionFor is the version of the NVRTC that compiles arch, part of every
// cache key.
func versionFor(arch string) (string, error) {
	n, err := NVRTCFor(arch)
	if err != nil {
		return "", err
	}
	return n.Version()
}

// checkCacheDir enforces the ownership and mode invariants on dir.
func checkCacheDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cuda: kernel cache: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cuda: kernel cache %s: not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("cuda: kernel cache %s has mode %04o: it must not be group- or "+
			"world-writable (chmod 700 it, or set %s to a private directory)", dir, perm, EnvCacheDir)
	}
	if owner, me, ok := fileOwner(fi); ok && owner != me {
		return fmt.Errorf("cuda: kernel cache %s is owned by uid %d, not the current user "+
			"(uid %d); set %s to a directory of your own", dir, owner, me, EnvCacheDir)
	}
	return nil
}

// Dir returns the cache directory.
func (c *Cache) Dir() string { return c.dir }

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Rebuilds: c.rebuilds.Load()}
}

// Get returns the compiled image of a kernel, compiling it with NVRTC on a miss.
// For a virtual arch (compute_XX) the image is PTX; for a real one (sm_XX) it is a
// cubin, which loads without the driver's JIT. Either goes to Device.LoadModule.
// A compile error is a *CompileError whose source is saved in the cache directory.
func (c *Cache) Get(src, name, arch string, opts []string) ([]byte, error) {
	ver, err := c.version(arch)
	if err != nil {
		return nil, fmt.Errorf("cuda: kernel cache: compile %q: %w", name, err)
	}
	key := CacheKey(src, name, ver, arch, opts)

	c.mu.Lock()
	if img, ok := c.mem[key]; ok {
		c.mu.Unlock()
		c.hits.Add(1)
		return img, nil
	}
	if f, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		<-f.done
		return f.image, f.err
	}
	f := &inflight{done: make(chan struct{})}
	c.inflight[key] = f
	c.mu.Unlock()

	f.image, f.err = c.load(key, src, name, arch, opts)

	c.mu.Lock()
	delete(c.inflight, key)
	if f.err == nil {
		c.mem[key] = f.image
	}
	c.mu.Unlock()
	close(f.done)
	return f.image, f.err
}

// load reads the entry for key from disk, or compiles and stores it.
func (c *Cache) load(key Key, src, name, arch string, opts []string) ([]byte, error) {
	path := filepath.Join(c.dir, key.String()+entrySuffix)
	raw, err := userfile.ReadFile(path) // a pipe planted there must not hang the compile
	switch {
	case err == nil:
		if img, derr := decodeEntry(key, raw); derr == nil {
			c.hits.Add(1)
			return img, nil
		}
		// Corrupt or truncated (a crash mid-copy, a full disk, a stray edit): drop it
		// and rebuild, so a bad entry costs one compile, never a wrong kernel.
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return nil, fmt.Errorf("cuda: kernel cache: removing corrupt entry: %w", rerr)
		}
		c.rebuilds.Add(1)
	case errors.Is(err, fs.ErrNotExist):
		c.misses.Add(1)
	default:
		return nil, fmt.Errorf("cuda: kernel cache: %w", err)
	}

	img, _, err := c.compile(src, name, arch, opts, strings.HasPrefix(arch, "sm_"))
	if err != nil {
		saveFailedSource(err, src, c.dir)
		return nil, err
	}
	if err := atomicfile.WriteFile(path, encodeEntry(key, img), 0o600); err != nil {
		return nil, fmt.Errorf("cuda: kernel cache: storing %q: %w", name, err)
	}
	return img, nil
}

// Entry layout, all integers little-endian:
//
//	magic   8 bytes  "LCCKRN1\n"
//	key     32 bytes the entry's Key, so a file renamed onto another key is caught
//	length  8 bytes  payload length
//	sum     32 bytes sha256 of the payload
//	payload length bytes
const (
	entryMagic  = "LCCKRN1\n"
	entryHeader = len(entryMagic) + sha256.Size + 8 + sha256.Size
	entrySuffix = ".kernel"
)

// encodeEntry frames an image for disk.
func encodeEntry(key Key, img []byte) []byte {
	b := make([]byte, 0, entryHeader+len(img))
	b = append(b, entryMagic...)
	b = append(b, key[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(img)))
	sum := sha256.Sum256(img)
	b = append(b, sum[:]...)
	return append(b, img...)
}

// decodeEntry checks an entry read from disk and returns its payload.
func decodeEntry(key Key, raw []byte) ([]byte, error) {
	if len(raw) < entryHeader {
		return nil, fmt.Errorf("entry truncated: %d bytes, header is %d", len(raw), entryHeader)
	}
	if string(raw[:len(entryMagic)]) != entryMagic {
		return nil, errors.New("entry has a bad magic number")
	}
	p := raw[len(entryMagic):]
	if !bytes.Equal(p[:sha256.Size], key[:]) {
		return nil, errors.New("entry belongs to another key")
	}
	p = p[sha256.Size:]
	n := binary.LittleEndian.Uint64(p)
	p = p[8:]
	sum, img := p[:sha256.Size], p[sha256.Size:]
	if uint64(len(img)) != n {
		return nil, fmt.Errorf("entry payload is %d bytes, header says %d", len(img), n)
	}
	if got := sha256.Sum256(img); !bytes.Equal(got[:], sum) {
		return nil, errors.New("entry checksum mismatch")
	}
	return img, nil
}
