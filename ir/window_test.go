package ir

import (
	"strings"
	"testing"
)

// TestWindowVerify: a window prints and parses back, and a negative window or
// one without causality is refused, naming the attribute.
func TestWindowVerify(t *testing.T) {
	const head = "func @f(%0: bf16[1,8,2,4] input \"q\", %1: bf16[1,8,2,4] input \"k\", %2: bf16[1,8,2,4] input \"v\",\n) {\n"
	good := head + "  %3, %4 = attention(%0, %1, %2) {causal, window=3} : bf16[1,8,2,4], f32[1,2,8]\n  return %3 \"o\"\n}\n"
	fn, err := Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if w := Window(fn.Body[0]); w != 3 {
		t.Errorf("Window = %d, want 3", w)
	}
	if s := Print(fn); !strings.Contains(s, "window=3") {
		t.Errorf("printed form lost the window:\n%s", s)
	}
	for name, attrs := range map[string]string{"negative": "{causal, window=-1}", "not causal": "{window=3}"} {
		src := head + "  %3, %4 = attention(%0, %1, %2) " + attrs + " : bf16[1,8,2,4], f32[1,2,8]\n  return %3 \"o\"\n}\n"
		if _, err := Parse(src); err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("%s: %v, want an error naming the window", name, err)
		}
	}
	for _, c := range []struct{ t, w, want int64 }{{0, 4, 0}, {3, 4, 0}, {4, 4, 1}, {9, 4, 6}, {9, 0, 0}} {
		if got := WindowStart(c.t, c.w); got != c.want {
			t.Errorf("WindowStart(%d, %d) = %d, want %d", c.t, c.w, got, c.want)
		}
	}
}
