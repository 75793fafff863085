// Package targets describes the machines lcc compiles for (docs/design.md §5): a built-in
// table of GPU nodes plus targets loaded from a JSON file (`--target-file`). A target
// drives the sharding degree (GPUs), the checkpoint budget (MemoryBytes), codegen
// (Arch) and the report's time estimates (peak rates and bandwidths).
//
// Sources for the built-in numbers (NVIDIA data sheets, SXM parts, dense math, no
// sparsity):
//   - A100 SXM: 312 TFLOP/s bf16, 19.5 TFLOP/s fp32; HBM 2039 GB/s (80 GB) or
//     1555 GB/s (40 GB); NVLink 3 600 GB/s.
//   - H100 SXM: 989 TFLOP/s bf16, 67 TFLOP/s fp32, HBM3 3.35 TB/s, NVLink 4 900 GB/s.
//   - H200 SXM: 989 TFLOP/s bf16, 67 TFLOP/s fp32, HBM3e 4.8 TB/s, NVLink 4 900 GB/s.
//   - Host link: PCIe Gen4 x16 (A100) 32 GB/s, Gen5 x16 (H100, H200) 64 GB/s per
//     direction.
//
// The roofline of lcc train --profile measures against what a device reaches,
// not its data sheet (CopyBytesPerSec, GEMMBF16FLOPs):
//   - H200: a device-to-device copy moves 4.2 TB/s and a bf16 GEMM at 8192³ does
//     794 TFLOP/s, both measured with PyTorch 2.11 on the project's H200
//     (2026-12-01).
//   - A100 SXM: about 1.7 TB/s copy (80 GB; 1.3 TB/s for 40 GB, about 85% of
//     HBM) and 280 TFLOP/s bf16 GEMM (about 90% of peak): commonly published
//     measurements, not measured by this project.
//   - Elsewhere (0 in the table or a target file) the data sheet's HBM bandwidth
//     and bf16 peak stand in (Target.CopyCeiling, Target.GEMMCeiling).
//
// Invariants:
//   - MemoryBytes is what the driver reports as total memory (nvidia-smi's
//     "memory.total": A100-80GB 81920 MiB, A100-40GB 40960 MiB, H100 81559 MiB,
//     H200 143771 MiB), not the marketing size, so budgets never exceed what exists.
//     The runtime subtracts its own reserve (context, workspace) from it.
//   - InterconnectBytesPerSec is the per-GPU NVLink aggregate over both directions as
//     NVIDIA quotes it; the cost model halves it for one direction.
//   - HostLinkBytesPerSec is what a pinned copy reaches in one direction, taken as
//     80% of the link's data sheet rate (an estimate, not a measurement: lcc
//     train's copies report the measured one); 0 (a target file without it)
//     means unknown, and the planner then does not time offload copies.
//   - Every Target from this package has passed Validate: a non-empty name, a known
//     Arch whose ComputeCapability matches, and positive counts, sizes and rates.
package targets

import (
	"fmt"
	"sort"
	"strings"
)

// Target is one machine: a node of identical GPUs (or the CPU, for --device=cpu).
type Target struct {
	// Name is the flag value that selects it (`--target=h200x8`).
	Name string `json:"name"`
	// GPUs is the number of devices, the default sharding degree.
	GPUs int `json:"gpus"`
	// Arch is the codegen architecture, "sm_80", "sm_90" or "sm_90a" (Hopper's
	// architecture-specific code: the h100 and h200 targets) (or "cpu").
	Arch string `json:"arch"`
	// ComputeCapability is Arch as a number (80, 90; 0 for the CPU).
	ComputeCapability int `json:"compute_capability"`
	// MemoryBytes is the memory of one device, as the driver reports it.
	MemoryBytes int64 `json:"memory_bytes"`
	// InterconnectBytesPerSec is the per-device bandwidth between devices (NVLink,
	// both directions together).
	InterconnectBytesPerSec float64 `json:"interconnect_bytes_per_sec"`
	// PeakBF16FLOPs is the dense bf16 tensor-core rate of one device, in FLOP/s.
	PeakBF16FLOPs float64 `json:"peak_bf16_flops"`
	// PeakFP32FLOPs is the non-tensor-core fp32 rate of one device, in FLOP/s.
	PeakFP32FLOPs float64 `json:"peak_fp32_flops"`
	// HBMBytesPerSec is the memory bandwidth of one device.
	HBMBytesPerSec float64 `json:"hbm_bytes_per_sec"`
	// HostLinkBytesPerSec is the pinned host-device copy rate of one device in
	// one direction (PCIe); 0 is unknown.
	HostLinkBytesPerSec float64 `json:"host_link_bytes_per_sec,omitempty"`
	// GPU is the device's product name, for reports ("NVIDIA H200").
	GPU string `json:"gpu"`
	// CopyBytesPerSec is the bandwidth a device-to-device copy reaches, and
	// GEMMBF16FLOPs the rate a large bf16 GEMM reaches: the roofline's
	// ceilings (0: unknown; CopyCeiling and GEMMCeiling use the data sheet's).
	CopyBytesPerSec float64 `json:"copy_bytes_per_sec,omitempty"`
	GEMMBF16FLOPs   float64 `json:"gemm_bf16_flops,omitempty"`
}

// CopyCeiling is the memory-bound roofline of one device in bytes/s: the
// measured copy bandwidth, else the data sheet's HBM bandwidth.
func (t Target) CopyCeiling() float64 {
	if t.CopyBytesPerSec > 0 {
		return t.CopyBytesPerSec
	}
	return t.HBMBytesPerSec
}

// GEMMCeiling is the compute roofline of one device in FLOP/s: the measured
// bf16 GEMM rate, else the data sheet's bf16 peak.
func (t Target) GEMMCeiling() float64 {
	if t.GEMMBF16FLOPs > 0 {
		return t.GEMMBF16FLOPs
	}
	return t.PeakBF16FLOPs
}

// IsCPU reports whether t is the host CPU rather than GPUs.
func (t Target) IsCPU() bool { return t.Arch == ArchCPU }

// TotalMemoryBytes is the memory of all devices together.
func (t Target) TotalMemoryBytes() int64 { return int64(t.GPUs) * t.MemoryBytes }

// String is the one-line summary used in reports and errors.
func (t Target) String() string {
	return fmt.Sprintf("%s (%d× %s, %s, %.1f GiB, %.0f TFLOP/s bf16)", t.Name, t.GPUs, t.GPU,
		t.Arch, float64(t.MemoryBytes)/(1<<30), t.PeakBF16FLOPs/1e12)
}

// ArchCPU is the Arch of the CPU target.
const ArchCPU = "cpu"

// archs maps each architecture lcc generates code for to its compute capability.
var archs = map[string]int{
	ArchCPU: 0,
	"sm_80": 80, // A100
	"sm_86": 86, // A10, RTX 30xx
	"sm_89": 89, // L4, L40S, RTX 40xx
	"sm_90": 90, // H100, H200 (without the architecture-specific features)
	// sm_90a: H100 and H200 with wgmma and setmaxnreg, which exist only in code
	// built for that one generation (flash attention tier 2).
	"sm_90a": 90,
}

// Units for the table below.
const (
	mib  = int64(1) << 20
	giga = 1e9
	tera = 1e12
)

// One row per device kind; nodes are built from these by count.
var (
	a100g80 = Target{GPU: "NVIDIA A100-SXM4-80GB", Arch: "sm_80", ComputeCapability: 80,
		MemoryBytes: 81920 * mib, InterconnectBytesPerSec: 600 * giga,
		PeakBF16FLOPs: 312 * tera, PeakFP32FLOPs: 19.5 * tera, HBMBytesPerSec: 2039 * giga,
		HostLinkBytesPerSec: 0.8 * 32 * giga, CopyBytesPerSec: 1700 * giga, GEMMBF16FLOPs: 280 * tera}
	a100g40 = Target{GPU: "NVIDIA A100-SXM4-40GB", Arch: "sm_80", ComputeCapability: 80,
		MemoryBytes: 40960 * mib, InterconnectBytesPerSec: 600 * giga,
		PeakBF16FLOPs: 312 * tera, PeakFP32FLOPs: 19.5 * tera, HBMBytesPerSec: 1555 * giga,
		HostLinkBytesPerSec: 0.8 * 32 * giga, CopyBytesPerSec: 1300 * giga, GEMMBF16FLOPs: 280 * tera}
	h100 = Target{GPU: "NVIDIA H100 80GB HBM3", Arch: "sm_90a", ComputeCapability: 90,
		MemoryBytes: 81559 * mib, InterconnectBytesPerSec: 900 * giga,
		PeakBF16FLOPs: 989 * tera, PeakFP32FLOPs: 67 * tera, HBMBytesPerSec: 3350 * giga,
		HostLinkBytesPerSec: 0.8 * 64 * giga}
	h200 = Target{GPU: "NVIDIA H200", Arch: "sm_90a", ComputeCapability: 90,
		MemoryBytes: 143771 * mib, InterconnectBytesPerSec: 900 * giga,
		PeakBF16FLOPs: 989 * tera, PeakFP32FLOPs: 67 * tera, HBMBytesPerSec: 4800 * giga,
		HostLinkBytesPerSec: 0.8 * 64 * giga, CopyBytesPerSec: 4200 * giga, GEMMBF16FLOPs: 794 * tera}
	// cpu is nominal: it lets --device=cpu plan with the same code. Its rates only
	// scale the report's estimates; one device means the interconnect is never used.
	cpu = Target{GPU: "host CPU", Arch: ArchCPU, ComputeCapability: 0,
		MemoryBytes: 16 << 30, InterconnectBytesPerSec: 50 * giga,
		PeakBF16FLOPs: 1 * tera, PeakFP32FLOPs: 1 * tera, HBMBytesPerSec: 50 * giga}
)

// node names a node of n devices of kind d.
func node(name string, n int, d Target) Target {
	d.Name, d.GPUs = name, n
	return d
}

// builtin is the table, sorted by name (checked by a test).
var builtin = []Target{
	node("a100-40gx1", 1, a100g40),
	node("a100-40gx8", 8, a100g40),
	node("a100x1", 1, a100g80),
	node("a100x2", 2, a100g80),
	node("a100x4", 4, a100g80),
	node("a100x8", 8, a100g80),
	node("cpu", 1, cpu),
	node("h100x1", 1, h100),
	node("h100x8", 8, h100),
	node("h200x1", 1, h200),
	node("h200x2", 2, h200),
	node("h200x4", 4, h200),
	node("h200x8", 8, h200),
}

// All returns the built-in targets sorted by name. The slice is a copy.
func All() []Target { return append([]Target(nil), builtin...) }

// Names returns the built-in target names, sorted.
func Names() []string {
	out := make([]string, len(builtin))
	for i, t := range builtin {
		out[i] = t.Name
	}
	return out
}

// Lookup returns the built-in target called name; the error lists the valid names.
func Lookup(name string) (Target, error) {
	i := sort.Search(len(builtin), func(i int) bool { return builtin[i].Name >= name })
	if i < len(builtin) && builtin[i].Name == name {
		return builtin[i], nil
	}
	return Target{}, fmt.Errorf("unknown target %q (valid: %s; or use --target-file)",
		name, strings.Join(Names(), ", "))
}

// Validate checks that t is usable: a non-empty name, a known arch matching the
// compute capability, and positive counts, sizes and rates. The error names the
// first bad field by its JSON name.
func (t Target) Validate() error {
	if strings.TrimSpace(t.Name) == "" {
		return &FieldError{Field: "name", Msg: "must not be empty"}
	}
	cc, ok := archs[t.Arch]
	if !ok {
		return &FieldError{Field: "arch", Msg: fmt.Sprintf("unknown arch %q (want one of %s)",
			t.Arch, strings.Join(archNames(), ", "))}
	}
	if t.ComputeCapability != cc {
		return &FieldError{Field: "compute_capability",
			Msg: fmt.Sprintf("is %d but arch %s means %d", t.ComputeCapability, t.Arch, cc)}
	}
	switch {
	case t.GPUs <= 0:
		return positive("gpus", float64(t.GPUs))
	case t.IsCPU() && t.GPUs != 1:
		return &FieldError{Field: "gpus", Msg: fmt.Sprintf("must be 1 for arch cpu, got %d",
			t.GPUs)}
	case t.MemoryBytes <= 0:
		return positive("memory_bytes", float64(t.MemoryBytes))
	case !(t.InterconnectBytesPerSec > 0):
		return positive("interconnect_bytes_per_sec", t.InterconnectBytesPerSec)
	case !(t.PeakBF16FLOPs > 0):
		return positive("peak_bf16_flops", t.PeakBF16FLOPs)
	case !(t.PeakFP32FLOPs > 0):
		return positive("peak_fp32_flops", t.PeakFP32FLOPs)
	case !(t.HBMBytesPerSec > 0):
		return positive("hbm_bytes_per_sec", t.HBMBytesPerSec)
	case t.HostLinkBytesPerSec < 0 || t.HostLinkBytesPerSec > 1e30:
		return &FieldError{Field: "host_link_bytes_per_sec",
			Msg: fmt.Sprintf("%g: want a rate in bytes per second (0: unknown)", t.HostLinkBytesPerSec)}
	}
	switch {
	case t.CopyBytesPerSec < 0 || t.CopyBytesPerSec > t.HBMBytesPerSec:
		return &FieldError{Field: "copy_bytes_per_sec", Msg: fmt.Sprintf("%g: want 0 (unknown) or up to "+
			"hbm_bytes_per_sec (%g)", t.CopyBytesPerSec, t.HBMBytesPerSec)}
	case t.GEMMBF16FLOPs < 0 || t.GEMMBF16FLOPs > t.PeakBF16FLOPs:
		return &FieldError{Field: "gemm_bf16_flops", Msg: fmt.Sprintf("%g: want 0 (unknown) or up to "+
			"peak_bf16_flops (%g)", t.GEMMBF16FLOPs, t.PeakBF16FLOPs)}
	}
	// +Inf passes "> 0" but would make every estimate zero.
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"interconnect_bytes_per_sec", t.InterconnectBytesPerSec},
		{"peak_bf16_flops", t.PeakBF16FLOPs},
		{"peak_fp32_flops", t.PeakFP32FLOPs},
		{"hbm_bytes_per_sec", t.HBMBytesPerSec},
	} {
		if f.v > 1e30 {
			return &FieldError{Field: f.name, Msg: fmt.Sprintf("%g is not a plausible rate", f.v)}
		}
	}
	return nil
}

// ForGPU is the built-in device row whose product name is gpu (a Device's
// Name, "NVIDIA H200"), as a one-GPU target: the roofline of the GPU a run
// found, whatever target it compiled for.
func ForGPU(gpu string) (Target, bool) {
	for _, t := range builtin {
		if t.GPU == gpu && !t.IsCPU() {
			t.GPUs = 1
			return t, true
		}
	}
	return Target{}, false
}

// WithArch is t with its code built for arch instead, every other property
// kept: how lcc train --recompile-for-device compiles a target's step for the
// GPU it finds. The arch must be a GPU arch lcc knows.
func (t Target) WithArch(arch string) (Target, error) {
	cc, ok := archs[arch]
	if !ok || arch == ArchCPU || t.IsCPU() {
		return Target{}, fmt.Errorf("target %s: cannot build its GPU code for %q (want a GPU arch: %s)",
			t.Name, arch, strings.Join(archNames(), ", "))
	}
	t.Arch, t.ComputeCapability = arch, cc
	return t, t.Validate()
}

// FieldError is a Validate failure: which JSON field, and what is wrong with it.
type FieldError struct {
	Field string
	Msg   string
}

// Error formats as "field NAME: MSG".
func (e *FieldError) Error() string { return fmt.Sprintf("field %s: %s", e.Field, e.Msg) }

// positive is the FieldError for a value that must be above zero.
func positive(field string, v float64) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf("must be positive, got %g", v)}
}

// archNames returns the known arch names, sorted.
func archNames() []string {
	out := make([]string, 0, len(archs))
	for a := range archs {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}
