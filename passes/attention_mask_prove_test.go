package passes

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Each case is a mask written in text IR with N for the sequence length (M for
// N+8, N1 for N−1, N2 and N3 for N+2 and N+3), how the attention reads it, and
// what it hides: at the small length as evaluated (the proof, where it answers,
// must agree), at the large one as proved, where "unproved" means the prover
// must give up (the match then keeps the mask as an explicit one).
var maskCases = []struct {
	name  string
	how   string // show: where(m, s, −inf); hide: where(m, −inf, s); add: s + m
	body  string
	small string // want at N = 8
	large string // want at N = 2^20
}{
	{"hf_le", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,1,N,1]} : i64[1,1,N,1]
  %2 = reshape(%0) {shape=[1,1,1,N]} : i64[1,1,1,N]
  %3 = le(%2, %1) : bool[1,1,N,N]
  return %3 "m"`, "causal", "causal"},
	{"ge_rows_cols", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = ge(%1, %2) : bool[N,N]
  return %3 "m"`, "causal", "causal"},
	{"lt_next", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = full() {dtype=i64, shape=[], value=1.0} : i64[]
  %4 = add(%1, %3) : i64[N,1]
  %5 = lt(%2, %4) : bool[N,N]
  return %5 "m"`, "causal", "causal"},
	{"sdpa_gt_hide", "hide", `
  %0 = range() {count=N, delta=2.0, dtype=f32, start=5.0} : f32[N]
  %1 = reshape(%0) {shape=[N,1]} : f32[N,1]
  %2 = reshape(%0) {shape=[1,N]} : f32[1,N]
  %3 = gt(%2, %1) : bool[N,N]
  return %3 "m"`, "causal", "causal"},
	{"trilu_ones", "show", `
  %0 = full() {dtype=bool, shape=[N,N], value=1.0} : bool[N,N]
  %1 = trilu(%0) {k=0} : bool[N,N]
  return %1 "m"`, "causal", "causal"},
	{"triu_neg_inf", "add", `
  %0 = full() {dtype=f32, shape=[], value=-Inf} : f32[]
  %1 = expand(%0) {shape=[N,N]} : f32[N,N]
  %2 = trilu(%1) {k=1, upper} : f32[N,N]
  return %2 "m"`, "causal", "causal"},
	{"where_finfo_min", "add", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,1,N,1]} : i64[1,1,N,1]
  %2 = reshape(%0) {shape=[1,1,1,N]} : i64[1,1,1,N]
  %3 = le(%2, %1) : bool[1,1,N,N]
  %4 = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %5 = full() {dtype=f32, shape=[], value=-3.4028234663852886e+38} : f32[]
  %6 = where(%3, %4, %5) : f32[1,1,N,N]
  return %6 "m"`, "causal", "causal"},
	{"and_all_ones_padding", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,1,N,1]} : i64[1,1,N,1]
  %2 = reshape(%0) {shape=[1,1,1,N]} : i64[1,1,1,N]
  %3 = le(%2, %1) : bool[1,1,N,N]
  %4 = full() {dtype=i64, shape=[1,N], value=1.0} : i64[1,N]
  %5 = cast(%4) {to=bool} : bool[1,N]
  %6 = reshape(%5) {shape=[1,1,1,N]} : bool[1,1,1,N]
  %7 = and(%3, %6) : bool[1,1,N,N]
  %8 = expand(%7) {shape=[2,4,N,N]} : bool[2,4,N,N]
  return %8 "m"`, "causal", "causal"},
	{"sliced_causal_buffer", "show", `
  %0 = full() {dtype=bool, shape=[M,M], value=1.0} : bool[M,M]
  %1 = trilu(%0) {k=0} : bool[M,M]
  %2 = slice(%1) {axes=[0,1], ends=[N3,N3], starts=[3,3], steps=[1,1]} : bool[N,N]
  return %2 "m"`, "causal", "causal"},
	{"packed_positions", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %2 = slice(%1) {axes=[1], ends=[1], starts=[0], steps=[1]} : i64[1,1]
  %3 = full() {dtype=i64, shape=[], value=1.0} : i64[]
  %4 = sub(%2, %3) : i64[1,1]
  %5 = concat(%4, %1) {axis=-1} : i64[1,N+1]
  %6 = slice(%5) {axes=[1], ends=[N], starts=[0], steps=[1]} : i64[1,N]
  %7 = slice(%5) {axes=[1], ends=[N+1], starts=[1], steps=[1]} : i64[1,N]
  %8 = sub(%7, %6) : i64[1,N]
  %9 = eq(%8, %3) : bool[1,N]
  %10 = not(%9) : bool[1,N]
  %11 = cast(%10) {to=i64} : i64[1,N]
  %12 = cumsum(%11) {axis=-1} : i64[1,N]
  %13 = reshape(%12) {shape=[1,N,1]} : i64[1,N,1]
  %14 = reshape(%12) {shape=[1,1,N]} : i64[1,1,N]
  %15 = eq(%13, %14) : bool[1,N,N]
  %16 = reshape(%0) {shape=[1,N,1]} : i64[1,N,1]
  %17 = reshape(%0) {shape=[1,1,N]} : i64[1,1,N]
  %18 = le(%17, %16) : bool[1,N,N]
  %19 = and(%18, %15) : bool[1,N,N]
  return %19 "m"`, "causal", "causal"},
	{"all_visible", "add", `
  %0 = full() {dtype=f32, shape=[1,1,N,N], value=0.0} : f32[1,1,N,N]
  return %0 "m"`, "none", "none"},

	// Sliding windows: visible iff −W < col − row ≤ 0 is window=W; a window as
	// wide as the sequence is causal.
	{"sliding_window", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = le(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=4.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = gt(%2, %5) : bool[N,N]
  %7 = and(%3, %6) : bool[N,N]
  return %7 "m"`, "window=4", "window=4"},
	{"window_ge_edge", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = le(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=4.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = ge(%2, %5) : bool[N,N]
  %7 = and(%3, %6) : bool[N,N]
  return %7 "m"`, "window=5", "window=5"},
	{"diagonal_only", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = eq(%2, %1) : bool[N,N]
  return %3 "m"`, "window=1", "window=1"},
	{"mistral_min_times_hidden", "add", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = gt(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=3.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = le(%2, %5) : bool[N,N]
  %7 = or(%3, %6) : bool[N,N]
  %8 = cast(%7) {to=f32} : f32[N,N]
  %9 = full() {dtype=f32, shape=[N,N], value=-3.4028234663852886e+38} : f32[N,N]
  %10 = mul(%9, %8) : f32[N,N]
  %11 = reshape(%10) {shape=[1,1,N,N]} : f32[1,1,N,N]
  return %11 "m"`, "window=3", "window=3"},
	{"gemma2_tril_overlay", "add", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,1,N,1]} : i64[1,1,N,1]
  %2 = reshape(%0) {shape=[1,1,1,N]} : i64[1,1,1,N]
  %3 = le(%2, %1) : bool[1,1,N,N]
  %4 = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %5 = full() {dtype=f32, shape=[], value=-3.4028234663852886e+38} : f32[]
  %6 = where(%3, %4, %5) : f32[1,1,N,N]
  %7 = full() {dtype=bool, shape=[1,1,N,N], value=1.0} : bool[1,1,N,N]
  %8 = trilu(%7) {k=-3} : bool[1,1,N,N]
  %9 = where(%8, %5, %6) : f32[1,1,N,N]
  return %9 "m"`, "window=3", "window=3"},
	{"window_and_all_ones_padding", "hide", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,1,N,1]} : i64[1,1,N,1]
  %2 = reshape(%0) {shape=[1,1,1,N]} : i64[1,1,1,N]
  %3 = le(%2, %1) : bool[1,1,N,N]
  %4 = full() {dtype=i64, shape=[], value=2.0} : i64[]
  %5 = sub(%1, %4) : i64[1,1,N,1]
  %6 = gt(%2, %5) : bool[1,1,N,N]
  %7 = and(%3, %6) : bool[1,1,N,N]
  %8 = full() {dtype=bool, shape=[2,1,1,N], value=1.0} : bool[2,1,1,N]
  %9 = and(%7, %8) : bool[2,1,N,N]
  %10 = not(%9) : bool[2,1,N,N]
  %11 = expand(%10) {shape=[2,4,N,N]} : bool[2,4,N,N]
  return %11 "m"`, "window=2", "window=2"},
	{"window_wider_than_seq", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = le(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=N.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = gt(%2, %5) : bool[N,N]
  %7 = and(%3, %6) : bool[N,N]
  return %7 "m"`, "causal", "causal"},
	{"window_one_short_of_seq", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = le(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=N1.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = gt(%2, %5) : bool[N,N]
  %7 = and(%3, %6) : bool[N,N]
  return %7 "m"`, "window=7", "window=1048575"},

	// Near windows: none may be accepted as one.
	{"window_sees_next_token", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = full() {dtype=i64, shape=[], value=1.0} : i64[]
  %4 = add(%1, %3) : i64[N,1]
  %5 = le(%2, %4) : bool[N,N]
  %6 = full() {dtype=i64, shape=[], value=4.0} : i64[]
  %7 = sub(%1, %6) : i64[N,1]
  %8 = gt(%2, %7) : bool[N,N]
  %9 = and(%5, %8) : bool[N,N]
  return %9 "m"`, "explicit", "explicit"},
	{"window_hides_diagonal", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = lt(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=4.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = gt(%2, %5) : bool[N,N]
  %7 = and(%3, %6) : bool[N,N]
  return %7 "m"`, "explicit", "explicit"},
	{"two_diagonals", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = eq(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=3.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = eq(%2, %5) : bool[N,N]
  %7 = or(%3, %6) : bool[N,N]
  return %7 "m"`, "explicit", "explicit"},
	{"window_rows_below_100", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = le(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=4.0} : i64[]
  %5 = sub(%1, %4) : i64[N,1]
  %6 = gt(%2, %5) : bool[N,N]
  %7 = and(%3, %6) : bool[N,N]
  %8 = full() {dtype=i64, shape=[], value=100.0} : i64[]
  %9 = lt(%1, %8) : bool[N,1]
  %10 = and(%7, %9) : bool[N,N]
  return %10 "m"`, "window=4", "unproved"},

	// Masks that are not causal: none may be accepted as causal.
	{"one_future_token", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = full() {dtype=i64, shape=[], value=1.0} : i64[]
  %4 = add(%1, %3) : i64[N,1]
  %5 = le(%2, %4) : bool[N,N]
  return %5 "m"`, "explicit", "explicit"},
	{"strict_hides_diagonal", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = lt(%2, %1) : bool[N,N]
  return %3 "m"`, "explicit", "explicit"},
	{"anti_causal", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = ge(%2, %1) : bool[N,N]
  return %3 "m"`, "explicit", "explicit"},
	{"trilu_minus_one", "show", `
  %0 = full() {dtype=bool, shape=[N,N], value=1.0} : bool[N,N]
  %1 = trilu(%0) {k=-1} : bool[N,N]
  return %1 "m"`, "explicit", "explicit"},
	{"triu_k0_hides_diagonal", "add", `
  %0 = full() {dtype=f32, shape=[N,N], value=-Inf} : f32[N,N]
  %1 = trilu(%0) {k=0, upper} : f32[N,N]
  return %1 "m"`, "explicit", "explicit"},
	{"shifted_slice", "show", `
  %0 = full() {dtype=bool, shape=[M,M], value=1.0} : bool[M,M]
  %1 = trilu(%0) {k=0} : bool[M,M]
  %2 = slice(%1) {axes=[0,1], ends=[N3,N2], starts=[3,2], steps=[1,1]} : bool[N,N]
  return %2 "m"`, "explicit", "explicit"},
	{"alibi_bias", "add", `
  %0 = range() {count=N, delta=1.0, dtype=f32, start=0.0} : f32[N]
  %1 = reshape(%0) {shape=[N,1]} : f32[N,1]
  %2 = reshape(%0) {shape=[1,N]} : f32[1,N]
  %3 = sub(%2, %1) : f32[N,N]
  return %3 "m"`, "explicit", "unproved"},
	{"bias_not_minus_inf", "add", `
  %0 = full() {dtype=bool, shape=[N,N], value=1.0} : bool[N,N]
  %1 = trilu(%0) {k=0} : bool[N,N]
  %2 = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %3 = full() {dtype=f32, shape=[], value=-1.0} : f32[]
  %4 = where(%1, %2, %3) : f32[N,N]
  return %4 "m"`, "explicit", "explicit"},
	{"rows_below_100", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[N,1]} : i64[N,1]
  %2 = reshape(%0) {shape=[1,N]} : i64[1,N]
  %3 = le(%2, %1) : bool[N,N]
  %4 = full() {dtype=i64, shape=[], value=100.0} : i64[]
  %5 = lt(%1, %4) : bool[N,1]
  %6 = and(%3, %5) : bool[N,N]
  return %6 "m"`, "causal", "unproved"},
	{"per_head_offset", "show", `
  %0 = range() {count=N, delta=1.0, dtype=i64, start=0.0} : i64[N]
  %1 = reshape(%0) {shape=[1,N,1]} : i64[1,N,1]
  %2 = reshape(%0) {shape=[1,1,N]} : i64[1,1,N]
  %3 = range() {count=2, delta=1.0, dtype=i64, start=0.0} : i64[2]
  %4 = reshape(%3) {shape=[2,1,1]} : i64[2,1,1]
  %5 = add(%1, %4) : i64[2,N,1]
  %6 = le(%2, %5) : bool[2,N,N]
  return %6 "m"`, "explicit", "unproved"},
	{"not_square", "show", `
  %0 = full() {dtype=bool, shape=[M,M], value=1.0} : bool[M,M]
  %1 = trilu(%0) {k=0} : bool[M,M]
  %2 = slice(%1) {axes=[0,1], ends=[N,N1], starts=[0,0], steps=[1,1]} : bool[N,N1]
  return %2 "m"`, "explicit", "unproved"},
}

// Positions compared in float32 are exact integers only below 2^24: past that the
// proof must give up, while int64 positions still prove causal.
func TestProveMaskExactness(t *testing.T) {
	const body = `
  %0 = range() {count=N, delta=1.0, dtype=DT, start=0.0} : DT[N]
  %1 = reshape(%0) {shape=[N,1]} : DT[N,1]
  %2 = reshape(%0) {shape=[1,N]} : DT[1,N]
  %3 = le(%2, %1) : bool[N,N]
  return %3 "m"`
	for _, tc := range []struct {
		dt     string
		n      int64
		proved bool
	}{{"f32", 1 << 24, true}, {"f32", 1<<24 + 2, false}, {"bf16", 256, true}, {"bf16", 258, false},
		{"i64", 1 << 27, true}} {
		f := maskFunc(t, strings.ReplaceAll(body, "DT", tc.dt), tc.n)
		kind, ok := newMaskProver().proveMask(f.Outputs[0].Value, maskVisibility("show"), tc.n, tc.n)
		if ok != tc.proved || (ok && kind != classCausal) {
			t.Errorf("%s positions, N=%d: %v (proved %v), want proved=%v", tc.dt, tc.n, kind, ok, tc.proved)
		}
	}
}

// maskFunc parses a mask case at length n.
func maskFunc(t *testing.T, body string, n int64) *ir.Func {
	t.Helper()
	r := strings.NewReplacer("N+1", strconv.FormatInt(n+1, 10), "N1", strconv.FormatInt(n-1, 10),
		"N2", strconv.FormatInt(n+2, 10), "N3", strconv.FormatInt(n+3, 10),
		"M", strconv.FormatInt(n+8, 10), "N", strconv.FormatInt(n, 10))
	f, err := ir.Parse("func @m() {" + r.Replace(body) + "\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// maskVisibility is the visible function of a mask read in the given way.
func maskVisibility(how string) func(x float64) (bool, bool) {
	switch how {
	case "show":
		return func(x float64) (bool, bool) { return x != 0, true }
	case "hide":
		return func(x float64) (bool, bool) { return x == 0, true }
	}
	return additiveVisible
}

func TestProveMask(t *testing.T) {
	for _, tc := range maskCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, sz := range []struct {
				n    int64
				want string
			}{{8, tc.small}, {1 << 20, tc.large}} {
				f := maskFunc(t, tc.body, sz.n)
				m := f.Outputs[0].Value
				vis := maskVisibility(tc.how)
				kind, ok := newMaskProver().proveMask(m, vis, sz.n, sz.n)
				if sz.n > 8 {
					got := kind.String()
					if !ok {
						got = "unproved"
					}
					if got != sz.want {
						t.Errorf("N=%d: proof says %s, want %s", sz.n, got, sz.want)
					}
					continue
				}
				// At the small length the evaluation is the reference.
				mt := newMaskEval(0).value(m)
				if mt == nil {
					t.Fatalf("N=%d: the mask could not be evaluated", sz.n)
				}
				ev := classify(mt, func(i int) (bool, bool) { return vis(mt.Float(i)) }, sz.n, sz.n)
				if ev.String() != sz.want {
					t.Errorf("N=%d: evaluation says %v, want %s", sz.n, ev, sz.want)
				}
				if ok && ev != kind {
					t.Errorf("N=%d: proof says %v, evaluation says %v", sz.n, kind, ev)
				}
			}
		})
	}
}

// The Hugging Face exports' masks, imported without constant folding so that the
// whole mask subgraph (Range, the packed-sequence check, Where of finfo.min) is
// there: the proof alone (evaluation disabled) finds every layer causal, and with
// evaluation on, the two agree (a disagreement panics in the pass).
func TestProveHFMasks(t *testing.T) {
	for _, tc := range []struct {
		model  string
		seq    int64
		layers int
	}{
		{"hf_llama_gqa_eager.onnx", 16, 2},
		{"hf_llama_gqa_sdpa.onnx", 16, 2},
		{"hf_gpt2.onnx", 64, 2},
		{"hf_llama_gqa_sdpa.onnx", 1 << 20, 2},
	} {
		t.Run(tc.model+"/"+strconv.FormatInt(tc.seq, 10), func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("..", "testdata", "hf", tc.model), onnx.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, limit := range []int64{1, 0} {
				if limit == 0 && tc.seq > 64 {
					continue
				}
				f, err := onnx.Import(m, onnx.ImportOptions{Dims: map[string]int64{"batch": 1,
					"seq": tc.seq, "sequence_length": tc.seq}, FoldLimit: 8})
				if err != nil {
					t.Fatal(err)
				}
				res, err := FindAttention(f, MatchConfig{RequireAttention: true, MaskEvalLimit: limit})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Found) != tc.layers {
					t.Fatalf("limit %d: found %d layers, want %d", limit, len(res.Found), tc.layers)
				}
				for _, a := range res.Found {
					if !a.Causal || a.Mask != "" {
						t.Errorf("limit %d: %+v, want causal without a mask", limit, a)
					}
				}
			}
		})
	}
}

// randomMask builds a random mask of [n, n] from positions (ranges with random
// starts and steps, sums, differences, scalings), comparisons, bands between two
// edges (sliding windows and near misses), Trilu of ones, logic, casts and slices
// of a larger mask, read in a random way.
func randomMask(r *rand.Rand, n int64) (*ir.Func, string) {
	b := ir.NewBuilder("m")
	pos := func(row bool) *ir.Value {
		v := b.Apply1(ir.OpRange, ir.A("start", float64(r.IntN(3)), "delta", float64([]int{1, 1, 2, -1}[r.IntN(4)]),
			"count", n, "dtype", tensor.I64))
		if row {
			return b.Reshape(v, n, 1)
		}
		return b.Reshape(v, 1, n)
	}
	var aff func(depth int) *ir.Value
	aff = func(depth int) *ir.Value {
		switch k := r.IntN(5); {
		case depth > 2 || k < 2:
			return pos(k == 0)
		case k == 2:
			return b.Apply1(ir.OpAdd, nil, aff(depth+1), b.Scalar(tensor.I64, float64(r.IntN(5)-2)))
		case k == 3:
			return b.Apply1(ir.OpSub, nil, aff(depth+1), aff(depth+1))
		default:
			return b.Apply1(ir.OpMul, nil, aff(depth+1), b.Scalar(tensor.I64, float64(r.IntN(3)+1)))
		}
	}
	full := func(m int64) *ir.Value {
		return b.Apply1(ir.OpFull, ir.A("value", 1.0, "shape", []int64{m, m}, "dtype", tensor.Bool))
	}
	var cond func(depth int) *ir.Value
	cond = func(depth int) *ir.Value {
		switch k := r.IntN(8); {
		case depth > 2 || k < 2:
			ops := []ir.Op{ir.OpEq, ir.OpLt, ir.OpLe, ir.OpGt, ir.OpGe}
			c := b.Apply1(ops[r.IntN(len(ops))], nil, aff(0), aff(0))
			if c.Type.Rank() == 2 && c.Type.Shape[0] == n && c.Type.Shape[1] == n {
				return c
			}
			return b.Apply1(ir.OpExpand, ir.A("shape", []int64{n, n}), c)
		case k == 2:
			return b.Apply1(ir.OpTrilu, ir.A("k", int64(r.IntN(5)-2), "upper", r.IntN(2) == 0), full(n))
		case k == 3:
			ops := []ir.Op{ir.OpAnd, ir.OpOr, ir.OpXor}
			return b.Apply1(ops[r.IntN(3)], nil, cond(depth+1), cond(depth+1))
		case k == 4:
			return b.Unary(ir.OpNot, cond(depth+1))
		case k == 5:
			// A slice of a larger causal-style buffer, at a random offset.
			big := b.Apply1(ir.OpTrilu, ir.A("k", int64(r.IntN(3)-1)), full(n+4))
			s0, s1 := int64(r.IntN(5)), int64(r.IntN(5))
			return b.Apply1(ir.OpSlice, ir.A("axes", []int64{0, 1}, "starts", []int64{s0, s1},
				"ends", []int64{s0 + n, s1 + n}, "steps", []int64{1, 1}), big)
		case k == 6:
			// Two comparisons of a column with the row shifted: a band such as
			// Mistral's sliding window (row − W < col ≤ row), or something near it.
			p := b.Apply1(ir.OpRange, ir.A("start", 0.0, "delta", 1.0, "count", n, "dtype", tensor.I64))
			row, col := b.Reshape(p, n, 1), b.Reshape(p, 1, n)
			edge := func(ops []ir.Op, lo, hi int) *ir.Value { // col op row + c, lo ≤ c ≤ hi
				c := b.Scalar(tensor.I64, float64(lo+r.IntN(hi-lo+1)))
				return b.Apply1(ops[r.IntN(len(ops))], nil, col, b.Apply1(ir.OpAdd, nil, row, c))
			}
			upper := edge([]ir.Op{ir.OpLt, ir.OpLe}, -1, 1)
			return b.Apply1(ir.OpAnd, nil, upper, edge([]ir.Op{ir.OpGt, ir.OpGe}, -5, 0))
		default:
			i := b.Apply1(ir.OpCast, ir.A("to", tensor.I64), cond(depth+1))
			return b.Apply1(ir.OpCast, ir.A("to", tensor.Bool), i)
		}
	}
	m, how := cond(0), []string{"show", "hide", "add"}[r.IntN(3)]
	if how == "add" {
		m = b.Apply1(ir.OpWhere, nil, m, b.Scalar(tensor.F32, 0), b.Scalar(tensor.F32, -math.MaxFloat32))
	}
	b.Output("m", m)
	f, err := b.Build()
	if err != nil {
		panic(err)
	}
	return f, how
}

// On random masks the proof, wherever it answers, agrees with evaluation: it
// never calls a mask causal, a window of W (of W exactly) or all-visible that is not.
func TestProveMaskRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 13))
	proved, causal, window := 0, 0, 0
	for i := 0; i < 3000; i++ {
		n := int64(2 + r.IntN(7))
		f, how := randomMask(r, n)
		m := f.Outputs[0].Value
		vis := maskVisibility(how)
		kind, ok := newMaskProver().proveMask(m, vis, n, n)
		mt := newMaskEval(0).value(m)
		ev := classify(mt, func(i int) (bool, bool) { return vis(mt.Float(i)) }, n, n)
		if ok {
			proved++
			if ev != kind {
				t.Fatalf("mask %d (%s): proof says %v, evaluation %v:\n%s", i, how, kind, ev, ir.Print(f))
			}
		}
		switch ev.kind {
		case maskCausal:
			causal++
		case maskWindow:
			window++
		}
	}
	t.Logf("%d of 3000 random masks proved; %d causal, %d sliding windows", proved, causal, window)
	if proved < 1500 || causal < 100 || window < 20 {
		t.Errorf("the generator is too weak: %d proved, %d causal, %d windows", proved, causal, window)
	}
}
