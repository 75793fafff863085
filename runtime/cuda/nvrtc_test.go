package cuda

import (
	"bytes"
	"errors"
	"github.com/lcc-dev/lcc/internal/gputest"
	"os"
	"strings"
	"testing"
)

// saxpySrc is the kernel the NVRTC and GPU tests compile. It has no includes, as
// lcc's generated kernels do not, so NVRTC alone compiles it.
const saxpySrc = `
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

// needNVRTC skips the test when no NVRTC can be loaded, saying why.
func needNVRTC(t *testing.T) string {
	t.Helper()
	v, err := NVRTCVersion()
	if errors.Is(err, ErrUnavailable) {
		gputest.Skipf(t, "skipping: no NVRTC (install Debian's libnvrtc11.2 from non-free, "+
			"or set %s): %v", EnvNVRTC, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNVRTCSymbols resolves every NVRTC entry point, so a misspelt name fails here.
func TestNVRTCSymbols(t *testing.T) {
	needNVRTC(t)
	for _, s := range defaultNVRTC.symbols() {
		if _, err := s.resolve(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
}

func TestCompilePTX(t *testing.T) {
	v := needNVRTC(t)
	t.Logf("NVRTC %s from %s", v, libnvrtc.path)
	for _, arch := range []string{"compute_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			ptx, log, err := Compile(saxpySrc, "saxpy.cu", arch, []string{"-lineinfo"})
			if err != nil {
				t.Fatalf("Compile: %v\nlog:\n%s", err, log)
			}
			target := ".target " + strings.Replace(arch, "compute", "sm", 1)
			for _, want := range []string{".entry saxpy", target} {
				if !bytes.Contains(ptx, []byte(want)) {
					t.Errorf("PTX lacks %q:\n%s", want, ptx)
				}
			}
			if bytes.IndexByte(ptx, 0) >= 0 {
				t.Error("PTX contains a NUL byte")
			}
		})
	}
}

func TestCompileCUBIN(t *testing.T) {
	needNVRTC(t)
	cubin, log, err := CompileCUBIN(saxpySrc, "saxpy.cu", "sm_90", nil)
	if err != nil {
		t.Fatalf("CompileCUBIN: %v\nlog:\n%s", err, log)
	}
	if !bytes.HasPrefix(cubin, []byte("\x7fELF")) {
		t.Errorf("cubin does not start with the ELF magic: % x", cubin[:min(8, len(cubin))])
	}
	if _, _, err := CompileCUBIN(saxpySrc, "saxpy.cu", "compute_80", nil); err == nil {
		t.Error("CompileCUBIN for a virtual arch succeeded")
	}
}

// TestCompileError checks that a compile error names the kernel, carries NVRTC's
// whole log and saves the source where the error says.
func TestCompileError(t *testing.T) {
	needNVRTC(t)
	src := "extern \"C\" __global__ void broken_kernel(float* y) {\n\ty[0] = undefined_name;\n}\n"
	_, log, err := Compile(src, "broken_kernel.cu", "compute_80", nil)
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CompileError", err)
	}
	msg := err.Error()
	for _, want := range []string{"broken_kernel.cu", "compute_80", "undefined_name", log} {
		if !strings.Contains(msg, strings.TrimRight(want, "\n")) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if ce.SourcePath == "" || !strings.Contains(msg, ce.SourcePath) {
		t.Fatalf("error does not name the saved source: %q", msg)
	}
	defer os.Remove(ce.SourcePath)
	saved, rerr := os.ReadFile(ce.SourcePath)
	if rerr != nil || string(saved) != src {
		t.Errorf("saved source %s = %q, %v; want the source", ce.SourcePath, saved, rerr)
	}
}

// TestCompileBadInput checks errors that need no NVRTC.
func TestCompileBadInput(t *testing.T) {
	for _, tc := range []struct{ arch, src, want string }{
		{"sm90", saxpySrc, "want compute_XX or sm_XX"},
		{"compute_80; rm", saxpySrc, "want compute_XX or sm_XX"},
		{"compute_80", "a\x00b", "NUL"},
	} {
		_, _, err := Compile(tc.src, "k", tc.arch, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(arch %q) = %v, want an error containing %q", tc.arch, err, tc.want)
		}
	}
}
