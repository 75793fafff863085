package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable is matched (errors.Is) by every error that says a library or one of
// its symbols could not be loaded, so callers and tests can tell "no CUDA here" from
// a failing call.
var ErrUnavailable = errors.New("cuda: library unavailable")

// LibraryError says a shared library could not be opened. Tried lists every name or
// path handed to the loader, each with the loader's message.
type LibraryError struct {
	Lib      string   // short name, e.g. "libnvrtc"
	Override string   // the environment variable whose value was tried alone, if set
	Tried    []string // the loader's message for each name, in the order tried
}

// Error lists every name tried with the loader's message.
func (e *LibraryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: cannot load %s: tried %s", e.Lib, strings.Join(e.Tried, "; "))
	if e.Override != "" {
		fmt.Fprintf(&b, " (from %s; unset it to search the usual names)", e.Override)
	}
	return b.String()
}

// Is reports that a LibraryError is an ErrUnavailable.
func (e *LibraryError) Is(target error) bool { return target == ErrUnavailable }

// SymbolError says a library was opened but lacks an entry point, usually because it
// is older than the function.
type SymbolError struct {
	Lib, Path, Symbol string
	Err               error // the loader's message
}

// Error names the library, its path and the missing symbol.
func (e *SymbolError) Error() string {
	return fmt.Sprintf("cuda: %s (%s) has no symbol %s: %v", e.Lib, e.Path, e.Symbol, e.Err)
}

// Is reports that a SymbolError is an ErrUnavailable.
func (e *SymbolError) Is(target error) bool { return target == ErrUnavailable }

// library is a shared library opened on first use.
type library struct {
	name string // short name for messages
	// candidates returns the environment variable and its value (override) or the
	// list of names to try in order. It is called once, at the first open.
	candidates func(config) (envVar, override string, names []string)

	once   sync.Once
	handle uintptr
	path   string // the name that opened
	err    error
}

// toolkitDirs are searched after the plain soname, which the dynamic loader looks up
// in LD_LIBRARY_PATH and the ld.so cache. Pip wheels and conda put libraries
// elsewhere; LD_LIBRARY_PATH or the override variables cover those.
func toolkitDirs(c config) []string {
	dirs := []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"}
	if c.cudaHome != "" {
		dirs = append([]string{filepath.Join(c.cudaHome, "lib64")}, dirs...)
	}
	return dirs
}

// searchList expands sonames into the plain names followed, for each, by the same
// name in each toolkit directory, keeping the preference order of sonames.
func searchList(c config, sonames ...string) []string {
	var out []string
	for _, s := range sonames {
		out = append(out, s)
		for _, d := range toolkitDirs(c) {
			out = append(out, filepath.Join(d, s))
		}
	}
	return out
}

// newLibrary describes a library found through envVar or else sonames.
func newLibrary(name, envVar string, envValue func(config) string, sonames ...string) *library {
	return &library{
		name: name,
		candidates: func(c config) (string, string, []string) {
			if v := envValue(c); v != "" {
				return envVar, v, []string{v}
			}
			return "", "", searchList(c, sonames...)
		},
	}
}

// open loads the library once; later calls return the first outcome.
func (l *library) open() error {
	l.once.Do(func() {
		envVar, _, names := l.candidates(readConfig())
		lerr := &LibraryError{Lib: l.name, Override: envVar}
		for _, n := range names {
			h, err := dlopen(n)
			if err == nil {
				l.handle, l.path = h, n
				return
			}
			msg := err.Error() // glibc's message already starts with the name
			if !strings.Contains(msg, n) {
				msg = n + ": " + msg
			}
			lerr.Tried = append(lerr.Tried, msg)
		}
		l.err = lerr
	})
	return l.err
}

// sym declares an entry point of l, resolved on first call.
func (l *library) sym(name string) *symbol { return &symbol{lib: l, name: name} }

// symbol is one entry point of a library.
type symbol struct {
	lib  *library
	name string

	once sync.Once
	addr uintptr
	err  error
}

// resolve opens the library if needed and looks the symbol up, once.
func (s *symbol) resolve() (uintptr, error) {
	s.once.Do(func() {
		if err := s.lib.open(); err != nil {
			s.err = err
			return
		}
		a, err := dlsym(s.lib.handle, s.name)
		if err != nil {
			s.err = &SymbolError{Lib: s.lib.name, Path: s.lib.path, Symbol: s.name, Err: err}
			return
		}
		s.addr = a
	})
	return s.addr, s.err
}

// call calls the C function with integer and pointer arguments and returns its
// integer result (every status code in these APIs is a C int, so callers keep the
// low 32 bits). Pointers to Go memory must be converted in the argument list itself,
// uintptr(unsafe.Pointer(&x)), so that uintptrescapes keeps x on the heap and alive
// until the call returns.
//
//go:uintptrescapes
func (s *symbol) call(args ...uintptr) (uintptr, error) {
	a, err := s.resolve()
	if err != nil {
		return 0, err
	}
	r, _, _ := purego.SyscallN(a, args...)
	return r, nil
}

// goString copies the NUL-terminated C string at p. It returns "" for NULL.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	// Converting through a pointer-typed load keeps vet's unsafeptr check quiet;
	// the memory is C memory the GC never moves.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// cString returns s as a heap-allocated NUL-terminated byte slice for C.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
