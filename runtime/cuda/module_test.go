package cuda

import (
	"math"
	"strings"
	"testing"
	"unsafe"
)

// TestPackArgs checks that each argument is stored with its C size at the address
// its kernelParams pointer holds, and that bytes past it are untouched.
func TestPackArgs(t *testing.T) {
	args := []any{int32(-2), float32(1.5), DevicePtr(0x7f0000001000), uint64(1 << 40),
		int8(-1), uint16(0xbeef), true, 3.25}
	buf, err := packArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	n := len(args)
	read := func(i, size int) uint64 {
		p := unsafe.Pointer(&buf[n+i])
		if uintptr(buf[i]) != uintptr(p) {
			t.Fatalf("argument %d: pointer %#x is not slot %p", i, buf[i], p)
		}
		var v uint64
		for b := 0; b < size; b++ {
			v |= uint64(*(*byte)(unsafe.Add(p, b))) << (8 * b)
		}
		return v
	}
	want := []struct {
		size int
		bits uint64
	}{
		{4, 0xfffffffe}, {4, uint64(math.Float32bits(1.5))}, {8, 0x7f0000001000},
		{8, 1 << 40}, {1, 0xff}, {2, 0xbeef}, {1, 1}, {8, math.Float64bits(3.25)},
	}
	for i, w := range want {
		if got := read(i, w.size); got != w.bits {
			t.Errorf("argument %d (%T): bits %#x, want %#x", i, args[i], got, w.bits)
		}
		if rest := buf[n+i] >> (8 * w.size); w.size < 8 && rest != 0 {
			t.Errorf("argument %d (%T): bytes past its %d bytes are %#x, want 0", i, args[i], w.size, rest)
		}
	}
}

func TestPackArgsRefusesGoInt(t *testing.T) {
	for _, a := range []any{int(3), uint(3), "x", []float32{1}} {
		_, err := packArgs([]any{int32(1), a})
		if err == nil || !strings.Contains(err.Error(), "argument 1") {
			t.Errorf("packArgs(%T) = %v, want an error naming argument 1", a, err)
		}
	}
	_, err := packArgs([]any{int(3)})
	if err == nil || !strings.Contains(err.Error(), "int32 or int64") {
		t.Errorf("packArgs(int) = %v, want a hint to use int32 or int64", err)
	}
}

func TestCheckArgs(t *testing.T) {
	f := &Function{name: "k", params: []int{4, 4, 8}}
	if err := f.checkArgs([]any{int32(1), float32(2), DevicePtr(3)}); err != nil {
		t.Errorf("matching arguments refused: %v", err)
	}
	err := f.checkArgs([]any{int32(1), float32(2)})
	if err == nil || !strings.Contains(err.Error(), "takes 3") {
		t.Errorf("missing argument: %v", err)
	}
	if err := f.checkArgs([]any{int32(1), float64(2), DevicePtr(3)}); err == nil ||
		!strings.Contains(err.Error(), "argument 1 is float64 (8 bytes)") {
		t.Errorf("wrong size: %v", err)
	}
}
