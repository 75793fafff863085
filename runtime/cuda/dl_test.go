package cuda

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"
)

// TestMissingLibraryOverride checks that a bad LCC_NVRTC is an error naming the path,
// not a panic, and that the override is tried alone.
func TestMissingLibraryOverride(t *testing.T) {
	t.Setenv(EnvNVRTC, "/nonexistent/libnvrtc.so")
	lib := newLibrary("libnvrtc", EnvNVRTC, func(c config) string { return c.nvrtc }, "libnvrtc.so.12")
	_, err := lib.sym("nvrtcVersion").call()
	if err == nil {
		t.Fatal("call through a missing library succeeded")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("errors.Is(%v, ErrUnavailable) = false", err)
	}
	var le *LibraryError
	if !errors.As(err, &le) || len(le.Tried) != 1 {
		t.Fatalf("error %v: want a *LibraryError with one name tried", err)
	}
	for _, want := range []string{"/nonexistent/libnvrtc.so", EnvNVRTC, "libnvrtc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestSearchListOrder checks that every soname is tried plain and then under the
// toolkit directories, newest first.
func TestSearchListOrder(t *testing.T) {
	got := searchList(config{cudaHome: "/opt/cuda"}, "libnvrtc.so.13", "libnvrtc.so.11.2")
	want := []string{"libnvrtc.so.13", "/opt/cuda/lib64/libnvrtc.so.13",
		"/usr/local/cuda/lib64/libnvrtc.so.13",
		"/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13", "libnvrtc.so.11.2",
		"/opt/cuda/lib64/libnvrtc.so.11.2", "/usr/local/cuda/lib64/libnvrtc.so.11.2",
		"/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.11.2"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("searchList:\n got %q\nwant %q", got, want)
	}
}

// TestMissingSymbol checks that a library without the entry point gives a
// *SymbolError naming the symbol. libc stands in for a too-old CUDA library.
func TestMissingSymbol(t *testing.T) {
	lib := newLibrary("libc", "LCC_TEST_UNUSED", func(config) string { return "" }, "libc.so.6")
	if err := lib.open(); err != nil {
		t.Skipf("no libc.so.6 to test with: %v", err)
	}
	_, err := lib.sym("lcc_no_such_function").call()
	var se *SymbolError
	if !errors.As(err, &se) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v: want a *SymbolError that is ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "lcc_no_such_function") {
		t.Errorf("error %q does not name the symbol", err)
	}
}

// TestSymbolCall checks the calling path on a function every system has.
func TestSymbolCall(t *testing.T) {
	lib := newLibrary("libc", "LCC_TEST_UNUSED", func(config) string { return "" }, "libc.so.6")
	if err := lib.open(); err != nil {
		t.Skipf("no libc.so.6 to test with: %v", err)
	}
	s := cString("hello, cuda")
	n, err := lib.sym("strlen").call(uintptr(unsafe.Pointer(&s[0])))
	if err != nil || n != 11 {
		t.Fatalf("strlen = %d, %v; want 11", n, err)
	}
	if got := goString(uintptr(unsafe.Pointer(&s[0]))); got != "hello, cuda" {
		t.Errorf("goString = %q", got)
	}
}

// TestNoLibrariesSubprocess runs the public API in a child process whose overrides
// point nowhere, so the package-level libraries are opened fresh: every entry point
// must return an error, and nothing may panic or exit.
func TestNoLibrariesSubprocess(t *testing.T) {
	if os.Getenv("LCC_CUDA_TEST_CHILD") == "1" {
		t.Skip("child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoLibrariesChild$", "-test.v")
	cmd.Env = append(os.Environ(), "LCC_CUDA_TEST_CHILD=1", EnvNVRTC+"=/nonexistent",
		EnvCUDALib+"=/nonexistent", EnvCublasLt+"=/nonexistent", EnvNCCL+"=/nonexistent")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestNoLibrariesChild") {
		t.Fatalf("child did not run:\n%s", out)
	}
}

// TestNoLibrariesChild is the body of TestNoLibrariesSubprocess.
func TestNoLibrariesChild(t *testing.T) {
	if os.Getenv("LCC_CUDA_TEST_CHILD") != "1" {
		t.Skip("runs only as TestNoLibrariesSubprocess's child")
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent") {
			t.Errorf("%s: error %v: want ErrUnavailable naming /nonexistent", what, err)
		}
	}
	_, _, err := Compile(`extern "C" __global__ void k() {}`, "k", "compute_80", nil)
	check("Compile", err)
	_, err = NVRTCVersion()
	check("NVRTCVersion", err)
	_, err = Open(0)
	check("Open", err)
	_, err = DeviceCount()
	check("DeviceCount", err)
	_, err = NCCLGetUniqueID()
	check("NCCLGetUniqueID", err)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(`extern "C" __global__ void k() {}`, "k", "compute_80", nil)
	check("Cache.Get", err)
}
