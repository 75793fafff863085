package tensor

import (
	"errors"
	"strings"
	"testing"
)

// TestBrief: short values print as fmt does; a long list is cut at an element
// near MaxBrief bytes and says how long it was; any other long value is cut too.
func TestBrief(t *testing.T) {
	if got := Brief([]int64{1, -2, 3}); got != "[1 -2 3]" {
		t.Errorf("Brief short = %q", got)
	}
	long := make([]int64, 5_000_000)
	got := Brief(long)
	if len(got) > MaxBrief+64 || !strings.HasSuffix(got, "... (5000000 entries)]") {
		t.Errorf("Brief of 5M entries: %d bytes ending %q", len(got), got[max(len(got)-40, 0):])
	}
	if got := Brief(strings.Repeat("x", 10*MaxBrief)); len(got) > MaxBrief+64 || !strings.Contains(got, "(10240 bytes)") {
		t.Errorf("Brief of a long string: %d bytes", len(got))
	}
}

// TestAlloc: a size past MaxElements is an error wrapping ErrTooLarge that names
// the shape, where New would panic; a fitting one allocates.
func TestAlloc(t *testing.T) {
	if _, err := Alloc(F32, 1<<40); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "f32[1099511627776]") {
		t.Errorf("Alloc(2^40) = %v", err)
	}
	if _, err := Alloc(I64, -1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Alloc(-1) = %v", err)
	}
	if x, err := Alloc(F32, 2, 3); err != nil || len(x.F) != 6 {
		t.Errorf("Alloc(2, 3) = %v, %v", x, err)
	}
	if b, err := HostBytes(Bool, []int64{3}); err != nil || b != 3*HostElemBytes {
		t.Errorf("HostBytes(bool[3]) = %d, %v", b, err)
	}
}
