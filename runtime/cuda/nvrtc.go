package cuda

import (
	"fmt"
	"os"
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

// NVRTC entry points.
var (
	nvrtcVersion           = libnvrtc.sym("nvrtcVersion")
	nvrtcGetErrorString    = libnvrtc.sym("nvrtcGetErrorString")
	nvrtcCreateProgram     = libnvrtc.sym("nvrtcCreateProgram")
	nvrtcDestroyProgram    = libnvrtc.sym("nvrtcDestroyProgram")
	nvrtcCompileProgram    = libnvrtc.sym("nvrtcCompileProgram")
	nvrtcGetProgramLogSize = libnvrtc.sym("nvrtcGetProgramLogSize")
	nvrtcGetProgramLog     = libnvrtc.sym("nvrtcGetProgramLog")
	nvrtcGetPTXSize        = libnvrtc.sym("nvrtcGetPTXSize")
	nvrtcGetPTX            = libnvrtc.sym("nvrtcGetPTX")
	nvrtcGetCUBINSize      = libnvrtc.sym("nvrtcGetCUBINSize") // NVRTC 11.1+, optional
	nvrtcGetCUBIN          = libnvrtc.sym("nvrtcGetCUBIN")
	nvrtcSymbols           = []*symbol{nvrtcVersion, nvrtcGetErrorString, nvrtcCreateProgram,
		nvrtcDestroyProgram, nvrtcCompileProgram, nvrtcGetProgramLogSize, nvrtcGetProgramLog,
		nvrtcGetPTXSize, nvrtcGetPTX, nvrtcGetCUBINSize, nvrtcGetCUBIN}
)

// nvrtcErrorCompilation is NVRTC_ERROR_COMPILATION: the source did not compile.
const nvrtcErrorCompilation = 6

// nvrtc calls an NVRTC entry point and turns a non-zero nvrtcResult into an error.
//
//go:uintptrescapes
func nvrtc(s *symbol, what string, args ...uintptr) error {
	r, err := s.call(args...)
	if err != nil {
		return err
	}
	if code := int32(r); code != 0 {
		msg := "unknown error"
		if p, err := nvrtcGetErrorString.call(uintptr(code)); err == nil {
			msg = goString(p)
		}
		return &Error{Lib: "libnvrtc", Func: s.name, What: what, Code: int(code), Msg: msg}
	}
	return nil
}

var (
	versionOnce sync.Once
	versionStr  string
	versionErr  error
)

// NVRTCVersion returns the loaded NVRTC's version, e.g. "11.8", which is part of
// every cache key.
func NVRTCVersion() (string, error) {
	versionOnce.Do(func() {
		var major, minor int32
		versionErr = nvrtc(nvrtcVersion, "", uintptr(unsafe.Pointer(&major)),
			uintptr(unsafe.Pointer(&minor)))
		versionStr = fmt.Sprintf("%d.%d", major, minor)
	})
	return versionStr, versionErr
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
	ptx, log, err = compile(src, name, arch, opts, false)
	saveFailedSource(err, src, os.TempDir())
	return ptx, log, err
}

// CompileCUBIN is Compile for a real architecture (sm_XX) returning a cubin, which
// loads without the driver's PTX JIT but only on that GPU generation.
func CompileCUBIN(src, name, arch string, opts []string) (cubin []byte, log string, err error) {
	cubin, log, err = compile(src, name, arch, opts, true)
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
func compile(src, name, arch string, opts []string, cubin bool) ([]byte, string, error) {
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
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := nvrtc(nvrtcCreateProgram, name, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); err != nil {
		return nil, "", err
	}
	defer nvrtc(nvrtcDestroyProgram, name, uintptr(unsafe.Pointer(&prog)))

	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	cstrs := make([][]byte, len(all))
	ptrs := make([]uintptr, len(all))
	for i, o := range all {
		cstrs[i] = cString(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cstrs[i][0]))
	}
	cerr := nvrtc(nvrtcCompileProgram, name, prog, uintptr(len(ptrs)),
		uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cstrs)
	log, lerr := programLog(prog, name)
	if cerr != nil {
		if e, ok := cerr.(*Error); ok && e.Code == nvrtcErrorCompilation {
			return nil, log, &CompileError{Name: name, Arch: arch, Log: log, Err: cerr}
		}
		return nil, log, cerr
	}
	if lerr != nil {
		return nil, "", lerr
	}
	sizeSym, getSym := nvrtcGetPTXSize, nvrtcGetPTX
	if cubin {
		sizeSym, getSym = nvrtcGetCUBINSize, nvrtcGetCUBIN
	}
	out, err := programOutput(prog, name, sizeSym, getSym)
	if err != nil {
		return nil, log, err
	}
	if !cubin {
		out = []byte(strings.TrimRight(string(out), "\x00"))
	}
	return out, log, nil
}

// programLog returns the compile log of prog.
func programLog(prog uintptr, name string) (string, error) {
	b, err := programOutput(prog, name, nvrtcGetProgramLogSize, nvrtcGetProgramLog)
	return strings.TrimRight(string(b), "\x00"), err
}

// programOutput reads one of NVRTC's size-then-copy outputs (log, PTX, cubin).
func programOutput(prog uintptr, name string, sizeSym, getSym *symbol) ([]byte, error) {
	var n uint64
	if err := nvrtc(sizeSym, name, prog, uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, n)
	if err := nvrtc(getSym, name, prog, uintptr(unsafe.Pointer(&buf[0]))); err != nil {
		return nil, err
	}
	return buf, nil
}
