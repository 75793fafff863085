package clit

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestFloat(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{1, "1.0f"}, {0.5, "0.5f"}, {-2, "-2.0f"}, {1e-5, "1e-05f"}, {1.0 / 3, "0.33333334f"},
		{math.Inf(1), "__int_as_float(0x7f800000)"}, {math.Inf(-1), "__int_as_float(0xff800000)"},
	} {
		if got := Float(c.in); got != c.want {
			t.Errorf("Float(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	// Every finite literal reads back as the same float32.
	for _, v := range []float64{0.08838834764831845, 1e-6, 3.4e38, 1.4e-45, -0.1} {
		s := strings.TrimSuffix(Float(v), "f")
		back, err := strconv.ParseFloat(s, 32)
		if err != nil || float32(back) != float32(v) {
			t.Errorf("Float(%v) = %q reads back as %v (%v)", v, s, back, err)
		}
	}
	if got := Float(math.NaN()); !strings.HasPrefix(got, "__int_as_float(0x") {
		t.Errorf("Float(NaN) = %q", got)
	}
}
