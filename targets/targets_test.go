package targets

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestBuiltinTable(t *testing.T) {
	all := All()
	if !sort.SliceIsSorted(all, func(i, j int) bool { return all[i].Name < all[j].Name }) {
		t.Fatal("builtin table is not sorted by name; Lookup's binary search needs it")
	}
	for i, tg := range all {
		if err := tg.Validate(); err != nil {
			t.Errorf("%s: %v", tg.Name, err)
		}
		if i > 0 && all[i-1].Name == tg.Name {
			t.Errorf("%s listed twice", tg.Name)
		}
	}
	// docs/design.md §5's required set, with the numbers the cost model relies on.
	const mib = 1 << 20
	want := []struct {
		name      string
		gpus      int
		arch      string
		cc        int
		memMiB    int64
		bf16TFLOP float64
		hbmGBs    float64
		linkGBs   float64
	}{
		{"a100x1", 1, "sm_80", 80, 81920, 312, 2039, 600},
		{"a100x8", 8, "sm_80", 80, 81920, 312, 2039, 600},
		{"a100-40gx8", 8, "sm_80", 80, 40960, 312, 1555, 600},
		{"h100x8", 8, "sm_90a", 90, 81559, 989, 3350, 900},
		{"h200x1", 1, "sm_90a", 90, 143771, 989, 4800, 900},
		{"h200x2", 2, "sm_90a", 90, 143771, 989, 4800, 900},
		{"h200x8", 8, "sm_90a", 90, 143771, 989, 4800, 900},
	}
	for _, w := range want {
		tg, err := Lookup(w.name)
		if err != nil {
			t.Errorf("Lookup(%s): %v", w.name, err)
			continue
		}
		if tg.Name != w.name || tg.GPUs != w.gpus || tg.Arch != w.arch ||
			tg.ComputeCapability != w.cc ||
			tg.MemoryBytes != w.memMiB*mib || tg.PeakBF16FLOPs != w.bf16TFLOP*1e12 ||
			tg.HBMBytesPerSec != w.hbmGBs*1e9 || tg.InterconnectBytesPerSec != w.linkGBs*1e9 {
			t.Errorf("Lookup(%s) = %+v", w.name, tg)
		}
		if tg.PeakFP32FLOPs >= tg.PeakBF16FLOPs {
			t.Errorf("%s: fp32 peak %g not below bf16 peak %g", w.name, tg.PeakFP32FLOPs,
				tg.PeakBF16FLOPs)
		}
	}
	if tg, err := Lookup("h200x8"); err != nil || tg.TotalMemoryBytes() != 8*143771*mib {
		t.Errorf("h200x8 total memory = %d, %v", tg.TotalMemoryBytes(), err)
	}
	cpu, err := Lookup("cpu")
	if err != nil || cpu.GPUs != 1 || !cpu.IsCPU() {
		t.Errorf("Lookup(cpu) = %+v, %v", cpu, err)
	}
	if tg, _ := Lookup("a100x8"); tg.IsCPU() {
		t.Error("a100x8.IsCPU() = true")
	}
}

func TestAllIsACopy(t *testing.T) {
	All()[0].GPUs = 999
	if All()[0].GPUs == 999 {
		t.Error("All returned the table itself")
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("h300x8")
	if err == nil {
		t.Fatal("Lookup(h300x8) succeeded")
	}
	for _, s := range []string{`"h300x8"`, "a100x8", "h200x1", "cpu", "--target-file"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
}

func TestString(t *testing.T) {
	tg, _ := Lookup("h200x8")
	want := "h200x8 (8× NVIDIA H200, sm_90a, 140.4 GiB, 989 TFLOP/s bf16)"
	if got := tg.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// writeFile writes content to a temp file and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "targets.json")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullTarget = `{"name": "l40sx4", "gpus": 4, "arch": "sm_89", "memory_bytes": 48e9,
	"interconnect_bytes_per_sec": 64e9, "peak_bf16_flops": 362e12, "peak_fp32_flops": 91.6e12,
	"hbm_bytes_per_sec": 864e9, "gpu": "NVIDIA L40S"}`

func TestLoadFile(t *testing.T) {
	// One object.
	ts, err := LoadFile(writeFile(t, fullTarget))
	if err != nil {
		t.Fatal(err)
	}
	want := Target{Name: "l40sx4", GPUs: 4, Arch: "sm_89", ComputeCapability: 89, MemoryBytes: 48e9,
		InterconnectBytesPerSec: 64e9, PeakBF16FLOPs: 362e12, PeakFP32FLOPs: 91.6e12,
		HBMBytesPerSec: 864e9, GPU: "NVIDIA L40S"}
	if len(ts) != 1 || ts[0] != want {
		t.Errorf("LoadFile = %+v\nwant %+v", ts, want)
	}

	// A list, with a target derived from a built-in.
	ts, err = LoadFile(writeFile(t, `[`+fullTarget+`,
		{"name": "h200x4-slow", "base": "h200x8", "gpus": 4,
			"interconnect_bytes_per_sec": 100e9}]`))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := Lookup("h200x8")
	base.Name, base.GPUs, base.InterconnectBytesPerSec = "h200x4-slow", 4, 100e9
	if len(ts) != 2 || ts[0] != want || ts[1] != base {
		t.Errorf("LoadFile = %+v", ts)
	}

	// Defaults without a base: compute capability and gpu from the arch.
	ts, err = LoadFile(writeFile(t, `{"name": "x", "gpus": 1, "arch": "sm_90", "memory_bytes": 1024,
		"interconnect_bytes_per_sec": 1, "peak_bf16_flops": 1, "peak_fp32_flops": 1,
		"hbm_bytes_per_sec": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].ComputeCapability != 90 || ts[0].GPU != "sm_90" {
		t.Errorf("defaults: %+v", ts[0])
	}
}

func TestLoadFileErrors(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"empty", ``, "empty file"},
		{"not JSON", `gpus = 8`, "want a JSON object or list"},
		{"bad JSON", `{"name": "x",`, "malformed JSON: it ends before its last value does"},
		{"bad JSON in a list", "[{\"base\": \"cpu\", \"name\": \"a\"},\n {\"name\" \"b\"}]",
			`malformed JSON at line 2, column 10: invalid character '"' after object key`},
		{"string gpus", `[{"base": "h200x8", "name": "a", "gpus": "8"}]`,
			`target "a": field gpus: want an integer, got string`},
		{"empty list", `[]`, "empty list"},
		{"no name", `{"base": "h200x8"}`, "entry 1: field name: missing"},
		{"empty name", `{"base": "h200x8", "name": " "}`, "field name: must not be empty"},
		{"unknown field", `{"base": "h200x8", "name": "a", "memory_gb": 80}`,
			`unknown field "memory_gb"`},
		{"unknown base", `{"base": "h300x8", "name": "a"}`,
			`target "a": field base: unknown target "h300x8"`},
		{"unknown arch", strings.Replace(fullTarget, "sm_89", "sm_100a", 1),
			`target "l40sx4": field arch: unknown arch "sm_100a"`},
		{"cc mismatch", `{"base": "h200x8", "name": "a", "compute_capability": 80}`,
			"field compute_capability: is 80 but arch sm_90a means 90"},
		{"zero gpus", `{"base": "h200x8", "name": "a", "gpus": 0}`,
			"field gpus: must be positive, got 0"},
		{"fractional gpus", `{"base": "h200x8", "name": "a", "gpus": 1.5}`, "gpus"},
		{"negative memory", `{"base": "h200x8", "name": "a", "memory_bytes": -1}`,
			"field memory_bytes: must be positive"},
		{"fractional memory", `{"base": "h200x8", "name": "a", "memory_bytes": 1.5}`,
			"field memory_bytes: 1.5 is not a whole number"},
		{"zero bf16", `{"base": "h200x8", "name": "a", "peak_bf16_flops": 0}`,
			"field peak_bf16_flops: must be positive"},
		{"huge rate", `{"base": "h200x8", "name": "a", "hbm_bytes_per_sec": 1e300}`,
			"field hbm_bytes_per_sec: 1e+300 is not a plausible rate"},
		{"missing field", strings.Replace(fullTarget, `"peak_fp32_flops": 91.6e12,`, "", 1),
			`target "l40sx4": field peak_fp32_flops: missing`},
		{"missing arch", `{"name": "a", "gpus": 1}`, "field arch: missing"},
		{"cpu with 8", `{"base": "cpu", "name": "a", "gpus": 8}`, "must be 1 for arch cpu"},
		{"duplicate", `[{"base": "cpu", "name": "a"}, {"base": "cpu", "name": "a"}]`,
			`target "a": defined twice`},
		{"trailing", `{"base": "cpu", "name": "a"} {}`, "malformed JSON at line 1, column 30"},
		{"copy above hbm", `{"base": "h200x8", "name": "a", "copy_bytes_per_sec": 5e12}`,
			"field copy_bytes_per_sec: 5e+12: want 0 (unknown) or up to hbm_bytes_per_sec"},
		{"negative gemm", `{"base": "h200x8", "name": "a", "gemm_bf16_flops": -1}`,
			"field gemm_bf16_flops: -1: want 0 (unknown)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.content)
			_, err := LoadFile(p)
			if err == nil {
				t.Fatalf("LoadFile succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error = %v\nwant it to name %s and contain %q", err, p, tc.want)
			}
		})
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.json")); err == nil ||
		!os.IsNotExist(unwrapAll(err)) {
		t.Errorf("LoadFile(missing) = %v", err)
	}
}

// unwrapAll returns the innermost error.
func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// TestWithArch: a target rebuilt for another arch keeps everything but the arch
// and its compute capability; the CPU and unknown archs are refused, naming them.
func TestWithArch(t *testing.T) {
	a100, _ := Lookup("a100x1")
	got, err := a100.WithArch("sm_90a")
	if err != nil {
		t.Fatal(err)
	}
	want := a100
	want.Arch, want.ComputeCapability = "sm_90a", 90
	if got != want {
		t.Fatalf("WithArch = %+v, want %+v", got, want)
	}
	cpu, _ := Lookup("cpu")
	for _, c := range []struct {
		t    Target
		arch string
	}{{a100, "sm_75"}, {a100, ArchCPU}, {cpu, "sm_80"}} {
		if _, err := c.t.WithArch(c.arch); err == nil || !strings.Contains(err.Error(), c.t.Name) ||
			!strings.Contains(err.Error(), c.arch) {
			t.Errorf("%s.WithArch(%q) = %v, want an error naming both", c.t.Name, c.arch, err)
		}
	}
}

// TestCeilings: the roofline's ceilings are the measured ones where the table
// has them (H200: 4.2 TB/s copy, 794 TFLOP/s bf16 GEMM), else the data sheet's;
// a target file over a base that gives a new HBM bandwidth drops the base's
// measured copy rate; ForGPU finds a device row by its product name.
func TestCeilings(t *testing.T) {
	h200, _ := Lookup("h200x8")
	h100, _ := Lookup("h100x8")
	if h200.CopyCeiling() != 4.2e12 || h200.GEMMCeiling() != 794e12 {
		t.Errorf("h200: copy %g, GEMM %g", h200.CopyCeiling(), h200.GEMMCeiling())
	}
	if h100.CopyCeiling() != h100.HBMBytesPerSec || h100.GEMMCeiling() != h100.PeakBF16FLOPs {
		t.Errorf("h100 (no measured ceilings): copy %g, GEMM %g", h100.CopyCeiling(), h100.GEMMCeiling())
	}
	ts, err := LoadFile(writeFile(t, `{"base": "h200x8", "name": "slow", "hbm_bytes_per_sec": 3e12}`))
	if err != nil || ts[0].CopyCeiling() != 3e12 || ts[0].GEMMCeiling() != 794e12 {
		t.Errorf("a base with a new HBM bandwidth: %+v, %v", ts, err)
	}
	if g, ok := ForGPU("NVIDIA H200"); !ok || g.GPUs != 1 || g.GEMMBF16FLOPs != 794e12 {
		t.Errorf("ForGPU(NVIDIA H200) = %+v, %v", g, ok)
	}
	if _, ok := ForGPU("NVIDIA B200"); ok {
		t.Error("ForGPU found a GPU the table lacks")
	}
}
