package ir

import (
	"os"
	"strings"
	"testing"
)

// A fused_elementwise node prints and parses back to itself, its body is the
// function FusedBodyText renders, and its FLOPs are its body's.
func TestFusedElementwiseText(t *testing.T) {
	src, err := os.ReadFile("testdata/fused.lcc")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := Print(f); got != string(src) {
		t.Fatalf("printed back:\n%s\nwant:\n%s", got, src)
	}
	n := f.Body[1]
	body, err := FusedBody(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(body.Params) != 3 || len(body.Body) != 4 || len(body.Outputs) != 2 {
		t.Errorf("body: %d params, %d nodes, %d outputs", len(body.Params), len(body.Body), len(body.Outputs))
	}
	if got := FusedBodyText(body); got != n.AttrString(FusedBodyAttr) {
		t.Errorf("FusedBodyText: %q\nwant %q", got, n.AttrString(FusedBodyAttr))
	}
	if got, want := n.FLOPs(), int64(4*64); got != want {
		t.Errorf("FLOPs %d, want %d", got, want)
	}
}

// A malformed body is an error naming what is wrong, never a panic.
func TestFusedElementwiseBadBody(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"%1 = exp(%0) : f32[4]", "does not end in a return"},
		{"return %0", "no nodes"},
		{"%1 = exp(%0) : f32[4]; return %2", "%2"},
		{"%1 = exp(%7) : f32[4]; return %1", "%7"},
		{"%1 = reduce_sum(%0) : f32[]; return %1", "not elementwise"},
		{"%1 = exp(%0) : f32[5]; return %1", "f32[5]"},
		{"", "does not end in a return"},
	} {
		src := `func @f(
    %0: f32[4] input "x",
) {
  %1 = fused_elementwise(%0) {body="` + strings.ReplaceAll(tc.body, `"`, `\"`) + `"} : f32[4]
  return %1 "y"
}
`
		f, err := Parse(src)
		if err == nil {
			err = Verify(f)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("body %q: %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}
