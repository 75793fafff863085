package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// libnvrtc is the runtime compiler. Newest first: a newer NVRTC knows more
// architectures, and the driver accepts PTX from any NVRTC not newer than itself.
// Debian's libnvrtc11.2 package ships NVRTC 11.8 under the soname libnvrtc.so.11.2.
var libnvrtc = newLibrary("libnvrtc", EnvNVRTC, func(c config) string { return c.nvrtc },
	"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")

// libnvrtc12 is a second NVRTC, named only by LCC_NVRTC12, for the architectures the
// default one is too old for (sm_90a needs NVRTC 12.0; Debian bookworm ships 11.8).
// It has no search list: unset, it is not loaded.
var libnvrtc12 = newLibrary("libnvrtc", EnvNVRTC12, func(c config) string { return c.nvrtc12 })

// NVRTC is one loaded NVRTC library. The package-level Compile, CompileCUBIN and
// NVRTCVersion use the default one (LCC_NVRTC, else the newest found); NVRTCFor
// returns the one that compiles a given architecture, which may be a second library
// loaded beside the default (both are opened RTLD_LOCAL under different sonames, so
// NVRTC 11.8 and 12.4 live in one process). Its methods are safe for concurrent use.
type NVRTC struct {
	lib *library

	version, getErrorString, createProgram, destroyProgram, compileProgram,
	getProgramLogSize, getProgramLog, getPTXSize, getPTX, getCUBINSize,
	getCUBIN *symbol

	versionOnce sync.Once
	versionStr  string
	versionErr  error
}

// newNVRTC declares the entry points of lib, each resolved on its first call.
func newNVRTC(lib *library) *NVRTC {
	return &NVRTC{lib: lib,
		version:           lib.sym("nvrtcVersion"),
		getErrorString:    lib.sym("nvrtcGetErrorString"),
		createProgram:     lib.sym("nvrtcCreateProgram"),
		destroyProgram:    lib.sym("nvrtcDestroyProgram"),
		compileProgram:    lib.sym("nvrtcCompileProgram"),
		getProgramLogSize: lib.sym("nvrtcGetProgramLogSize"),
		getProgramLog:     lib.sym("nvrtcGetProgramLog"),
		getPTXSize:        lib.sym("nvrtcGetPTXSize"),
		getPTX:            lib.sym("nvrtcGetPTX"),
		getCUBINSize:      lib.sym("nvrtcGetCUBINSize"), // NVRTC 11.1+
		getCUBIN:          lib.sym("nvrtcGetCUBIN"),
	}
}

// symbols lists every entry point, for the test that resolves them all.
func (n *NVRTC) symbols() []*symbol {
	return []*symbol{n.version, n.getErrorString, n.createProgram, n.destroyProgram,
		n.compileProgram, n.getProgramLogSize, n.getProgramLog, n.getPTXSize, n.getPTX,
		n.getCUBINSize, n.getCUBIN}
}

var (
	defaultNVRTC = newNVRTC(libnvrtc)
	secondNVRTC  = newNVRTC(libnvrtc12)
)

// nvrtcErrorCompilation is NVRTC_ERROR_COMPILATION: the source did not compile.
const nvrtcErrorCompilation = 6

// call calls an entry point of n and turns a non-zero nvrtcResult into an error.
//
//go:uintptrescapes
func (n *NVRTC) call(s *symbol, what string, args ...uintptr) error {
	r, err := s.call(args...)
	if err != nil {
		return err
	}
	if code := int32(r); code != 0 {
		msg := "unknown error"
		if p, err := n.getErrorString.call(uintptr(code)); err == nil {
			msg = goString(p)
		}
		return &Error{Lib: "libnvrtc", Func: s.name, What: what, Code: int(code), Msg: msg}
	}
	return nil
}

// Version returns the library's version, e.g. "12.4", which is part of every cache
// key. It loads the library on first use.
func (n *NVRTC) Version() (string, error) {
	n.versionOnce.Do(func() {
		var major, minor int32
		n.versionErr = n.call(n.version, "", uintptr(unsafe.Pointer(&major)),
			uintptr(unsafe.Pointer(&minor)))
		n.versionStr = fmt.Sprintf("%d.%d", major, minor)
		if n.versionErr == nil {
			n.preloadBuiltins()
		}
	})
	return n.versionStr, n.versionErr
}

// preloadBuiltins opens the libnvrtc-builtins of n's version from the folder of an
// NVRTC opened by path. NVRTC dlopens it by soname at its first compile, which finds
// it only on the loader's search path; but glibc hands back a library already loaded
// under that soname, so an NVRTC unpacked anywhere (CI's NVRTC 12.4, an LCC_NVRTC
// path) compiles without LD_LIBRARY_PATH. A missing file is left for NVRTC to report.
// The handle stays open for the process, as the libraries do.
func (n *NVRTC) preloadBuiltins() {
	if !strings.Contains(n.lib.path, "/") {
		return
	}
	p := filepath.Join(filepath.Dir(n.lib.path), "libnvrtc-builtins.so."+n.versionStr)
	if _, err := os.Stat(p); err == nil {
		dlopen(p)
	}
}

// Path returns the name or path the library was opened by, loading it if needed; ""
// when it cannot be loaded.
func (n *NVRTC) Path() string {
	if n.lib.open() != nil {
		return ""
	}
	return n.lib.path
}

// NVRTCVersion returns the default NVRTC's version, e.g. "11.8".
func NVRTCVersion() (string, error) { return defaultNVRTC.Version() }

// minNVRTC is the oldest NVRTC that compiles each architecture that needs more than
// NVRTC 11.8, the oldest lcc supports. Architecture-specific Hopper code (wgmma,
// setmaxnreg) arrived with CUDA 12.0.
var minNVRTC = map[string][2]int{"sm_90a": {12, 0}, "compute_90a": {12, 0}}

// NVRTCFor returns an NVRTC that compiles arch: the default one when it is new
// enough, else the one LCC_NVRTC12 names. The error matches ErrUnavailable when
// neither library can be loaded or the default is too old and LCC_NVRTC12 is unset;
// a library that LCC_NVRTC12 names but that is missing or too old is a plain error,
// since a setting that does not work should not read as "not installed".
func NVRTCFor(arch string) (*NVRTC, error) {
	need, ok := minNVRTC[arch]
	if !ok {
		if _, err := defaultNVRTC.Version(); err != nil {
			return nil, err
		}
		return defaultNVRTC, nil
	}
	newEnough := func(n *NVRTC) (string, bool, error) {
		v, err := n.Version()
		if err != nil {
			return "", false, err
		}
		var major, minor int
		fmt.Sscanf(v, "%d.%d", &major, &minor)
		return v, major > need[0] || (major == need[0] && minor >= need[1]), nil
	}
	dv, ok, derr := newEnough(defaultNVRTC)
	if derr == nil && ok {
		return defaultNVRTC, nil
	}
	why := fmt.Sprintf("the default NVRTC is %s (%s)", dv, defaultNVRTC.Path())
	if derr != nil {
		why = "no default NVRTC (" + derr.Error() + ")"
	}
	env := readConfig().nvrtc12
	if env == "" {
		return nil, fmt.Errorf("%w: %s needs NVRTC %d.%d or newer and %s; set %s to such a "+
			"libnvrtc.so", ErrUnavailable, arch, need[0], need[1], why, EnvNVRTC12)
	}
	sv, ok, serr := newEnough(secondNVRTC)
	if serr != nil {
		return nil, fmt.Errorf("cuda: %s=%s: %v", EnvNVRTC12, env, serr)
	}
	if !ok {
		return nil, fmt.Errorf("cuda: %s=%s is NVRTC %s; %s needs %d.%d or newer", EnvNVRTC12,
			env, sv, arch, need[0], need[1])
	}
	return secondNVRTC, nil
}

// archRE matches NVRTC's --gpu-architecture values: virtual compute_XX (PTX, which
// the driver compiles for the device at load time) or real sm_XX, optionally with
// an "a" suffix for architecture-specific features (sm_90a).
var archRE = regexp.MustCompile(`^(compute|sm)_[0-9]{2,3}[af]?$`)

// CompileError is a kernel that NVRTC rejected. Error() carries the kernel's name,
// the architecture, where the source was saved and NVRTC's whole log.
type CompileError struct {
	Name       string // the program name given to Compile
	Arch       string
	Log        string // NVRTC's log, complete
	SourcePath string // where the failing source was saved, "" if saving failed too
	Err        error  // the NVRTC status
}

// Error names the kernel and the saved source, then gives NVRTC's log.
func (e *CompileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: NVRTC could not compile kernel %q for %s", e.Name, e.Arch)
	if e.SourcePath != "" {
		fmt.Fprintf(&b, " (source saved to %s)", e.SourcePath)
	}
	status := e.Err.Error()
	if ne, ok := e.Err.(*Error); ok {
		status = ne.Msg
	}
	fmt.Fprintf(&b, ": %s\n%s", status, strings.TrimRight(e.Log, "\n"))
	return b.String()
}

// Unwrap returns the NVRTC status.
func (e *CompileError) Unwrap() error { return e.Err }

// Compile compiles CUDA C++ source with NVRTC for arch ("compute_80" gives PTX the
// driver can JIT for any later GPU, "sm_90" targets one GPU generation) and returns
// the PTX without its terminating NUL. opts are NVRTC options such as "-lineinfo";
// --gpu-architecture is added from arch. log is NVRTC's log, which may hold warnings
// even on success. On a compile error, err is a *CompileError and the source is
// saved to a temporary file whose path the error names.
func Compile(src, name, arch string, opts []string) (ptx []byte, log string, err error) {
	return defaultNVRTC.Compile(src, name, arch, opts)
}

// Compile is the package's Compile with n.
func (n *NVRTC) Compile(src, name, arch string, opts []string) ([]byte, string, error) {
	ptx, log, err := n.compile(src, name, arch, opts, false)
	saveFailedSource(err, src, os.TempDir())
	return ptx, log, err
}

// CompileCUBIN is Compile for a real architecture (sm_XX) returning a cubin, which
// loads without the driver's PTX JIT but only on that GPU generation.
func CompileCUBIN(src, name, arch string, opts []string) (cubin []byte, log string, err error) {
	return defaultNVRTC.CompileCUBIN(src, name, arch, opts)
}

// CompileCUBIN is the package's CompileCUBIN with n.
func (n *NVRTC) CompileCUBIN(src, name, arch string, opts []string) ([]byte, string, error) {
	cubin, log, err := n.compile(src, name, arch, opts, true)
	saveFailedSource(err, src, os.TempDir())
	return cubin, log, err
}

// saveFailedSource writes src into dir and records the path in err when err is a
// *CompileError, so a user can rerun the compile by hand.
func saveFailedSource(err error, src, dir string) {
	ce, ok := err.(*CompileError)
	if !ok {
		return
	}
	f, ferr := os.CreateTemp(dir, "lcc-failed-"+fileSafe(ce.Name)+"-*.cu")
	if ferr != nil {
		return
	}
	_, werr := f.WriteString(src)
	if cerr := f.Close(); werr == nil && cerr == nil {
		ce.SourcePath = f.Name()
	}
}

// fileSafe maps a kernel name to a string usable in a file name.
func fileSafe(name string) string {
	b := []byte(name)
	for i, c := range b {
		ok := c == '_' || c == '-' || c == '.' || ('0' <= c && c <= '9') ||
			('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// compile runs one NVRTC program and returns PTX, or the cubin if cubin is set.
func (n *NVRTC) compile(src, name, arch string, opts []string, cubin bool) ([]byte, string,
	error) {
	if !archRE.MatchString(arch) {
		return nil, "", fmt.Errorf("cuda: compile %q: arch %q: want compute_XX or sm_XX, "+
			"e.g. compute_80 or sm_90", name, arch)
	}
	if cubin && !strings.HasPrefix(arch, "sm_") {
		return nil, "", fmt.Errorf("cuda: compile %q: a cubin needs a real arch (sm_XX), got %q",
			name, arch)
	}
	if strings.IndexByte(src, 0) >= 0 {
		return nil, "", fmt.Errorf("cuda: compile %q: source contains a NUL byte", name)
	}
	if _, err := n.Version(); err != nil { // loads the library and its builtins
		return nil, "", err
	}
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := n.call(n.createProgram, name, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); err != nil {
		return nil, "", err
	}
	defer n.call(n.destroyProgram, name, uintptr(unsafe.Pointer(&prog)))

	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	cstrs := make([][]byte, len(all))
	ptrs := make([]uintptr, len(all))
	for i, o := range all {
		cstrs[i] = cString(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cstrs[i][0]))
	}
	cerr := n.call(n.compileProgram, name, prog, uintptr(len(ptrs)),
		uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cstrs)
	log, lerr := n.programLog(prog, name)
	if cerr != nil {
		if e, ok := cerr.(*Error); ok && e.Code == nvrtcErrorCompilation {
			return nil, log, &CompileError{Name: name, Arch: arch, Log: log, Err: cerr}
		}
		return nil, log, cerr
	}
	if lerr != nil {
		return nil, "", lerr
	}
	sizeSym, getSym := n.getPTXSize, n.getPTX
	if cubin {
		sizeSym, getSym = n.getCUBINSize, n.getCUBIN
	}
	out, err := n.programOutput(prog, name, sizeSym, getSym)
	if err != nil {
		return nil, log, err
	}
	if !cubin {
		out = []byte(strings.TrimRight(string(out), "\x00"))
	}
	return out, log, nil
}

// programLog returns the compile log of prog.
func (n *NVRTC) programLog(prog uintptr, name string) (string, error) {
	b, err := n.programOutput(prog, name, n.getProgramLogSize, n.getProgramLog)
	return strings.TrimRight(string(b), "\x00"), err
}

// programOutput reads one of NVRTC's size-then-copy outputs (log, PTX, cubin).
func (n *NVRTC) programOutput(prog uintptr, name string, sizeSym, getSym *symbol) ([]byte, error) {
	var size uint64
	if err := n.call(sizeSym, name, prog, uintptr(unsafe.Pointer(&size))); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	if err := n.call(getSym, name, prog, uintptr(unsafe.Pointer(&buf[0]))); err != nil {
		return nil, err
	}
	return buf, nil
}
