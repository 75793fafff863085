package cuda

import (
	"testing"

	"github.com/ebitengine/purego"
)

// TestNCCLCommInitSignature checks that purego accepts ncclCommInitRank's Go
// signature (a 128-byte struct by value) on this platform. Registration validates
// the types without calling, so any function address will do.
func TestNCCLCommInitSignature(t *testing.T) {
	lib := newLibrary("libc", "LCC_TEST_UNUSED", func(config) string { return "" }, "libc.so.6")
	addr, err := lib.sym("strlen").resolve()
	if err != nil {
		t.Skipf("no libc.so.6 to test with: %v", err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("purego.RegisterFunc panicked: %v", r)
		}
	}()
	purego.RegisterFunc(&commInitFn, addr)
	commInitFn = nil
}

func TestNCCLTypes(t *testing.T) {
	for dt, want := range map[string]uintptr{"f32": 7, "bf16": 9, "f16": 6, "i32": 2, "i64": 4} {
		got, err := ncclType(mustDType(t, dt))
		if err != nil || got != want {
			t.Errorf("ncclType(%s) = %d, %v; want %d", dt, got, err, want)
		}
	}
}
