package driver

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/tensor"
)

// The host side of a GPU step's plan (issue #26, "the planner knows the host").
// The planned host peak is part of the one memory model (cost.StepMemory): the
// model as lcc holds it on the host, the pinned block of offloaded activations
// and the pinned checkpoint buffer. A budget for it comes only from
// --host-memory-budget, never from the machine a compile runs on, so that a
// compile without the flag is byte-identical everywhere (same IR, kernels and
// hash); lcc train compares the plan with the limits it measures before it
// allocates anything (train.CheckHost).

// hostModel is what lcc holds of f's model on the host while f is set up (its
// weights and, for an inline model, the file's weight bytes while it is parsed), and
// what it keeps once a resident run has uploaded it (every host tensor of a
// trained weight and its optimizer state is then released: train's
// releaseHost).
func (m memoryModel) hostModel(f *ir.Func) (setup, kept int64) {
	elems := weightElems(f)
	// An inline model's weights are in its file, parsed beside the decoded
	// weights (frontends/onnx collects the file itself once parsed).
	setup = cost.HostModelBytes(elems) + f.InlineBytes
	if !m.trained {
		return setup, setup
	}
	return setup, cost.HostModelBytes(elems - trainable(f))
}

// hostResume is what a run of f that resumes holds on the host while its
// checkpoint loads (0 for one that does not): the model's weights, the
// checkpoint's decoded into them, and the checkpoint's masters and moments
// beside them. An inline model's file was collected once parsed, before.
func (m memoryModel) hostResume(f *ir.Func) int64 {
	if !m.resume || !m.trained {
		return 0
	}
	return cost.HostModelBytes(weightElems(f)) + cost.ResumeStateBytes(trainable(f))
}

// weightElems is the elements of f's weights.
func weightElems(f *ir.Func) int64 {
	var elems int64
	for _, p := range f.Params {
		if p.Role == ir.RoleWeight {
			elems += p.Value.Type.Numel()
		}
	}
	return elems
}

// hostRuntime is what a run of the step holds on the host besides its model
// and pinned buffers: the CUDA runtime's for a GPU target, nothing for the CPU.
func (m memoryModel) hostRuntime() int64 {
	if m.gpu() {
		return cost.HostRuntimeBytes
	}
	return 0
}

// hostFixed is the host memory f's plan needs besides its offloaded
// activations, at the phase where it needs the most (cost.StepMemory's
// HostPeakBytes with no offload).
func (m memoryModel) hostFixed(f *ir.Func) int64 {
	setup, kept := m.hostModel(f)
	if m.snapshots && m.trained {
		kept += cost.OptimizerStateBytes(trainable(f))
	}
	var state int64
	if m.trained && m.hostState {
		hs := cost.StepMemory{}.WithHostState(trainable(f), int64(m.storage.Size()))
		if m.gpuUpdate {
			hs = hs.WithGPUUpdate()
		}
		state = hs.HostStateBytes + hs.HostStagingBytes
	}
	return max(setup, m.hostResume(f), kept) + state + m.hostRuntime()
}

// hostFixedParts names what hostFixed holds, for messages.
func (m memoryModel) hostFixedParts() string {
	if m.resume && m.trained {
		return "model, checkpoint buffer and the checkpoint --resume loads"
	}
	return "model and checkpoint buffer"
}

// offloadBounds are checkpointing's bounds on offload for f under a host budget
// (0: none): the pinned bytes left beside the host's fixed part (at least 1, so
// that a budget the fixed part fills refuses every offload rather than none),
// and the compute rate and host link rate the copies are timed at. The link
// rate is in the IR's bytes: a bf16-stored f32 value crosses in half its IR
// size. A target without a link rate (or the CPU) times nothing.
func (m memoryModel) offloadBounds(f *ir.Func, hostBudget int64) (host int64, flops, link float64) {
	if hostBudget > 0 {
		host = max(hostBudget-m.hostFixed(f), 1)
	}
	if !m.gpu() || m.target.HostLinkBytesPerSec <= 0 {
		return host, 0, 0
	}
	link = m.target.HostLinkBytesPerSec
	if m.storage == tensor.BF16 {
		link *= 2
	}
	// The tensor-core peak: the shortest compute, so copies are never assumed
	// hidden behind time the step does not take.
	return host, m.target.PeakBF16FLOPs, link
}

// fitHost refuses a GPU step whose planned host peak passes a host budget
// (0: none), before anything is allocated: both figures, the parts, and what
// would fit.
func (m memoryModel) fitHost(f *ir.Func, sm cost.StepMemory, budget int64) error {
	if budget <= 0 || !m.gpu() || sm.HostPeakBytes() <= budget {
		return nil
	}
	var fit []string
	fit = append(fit, "--host-memory-budget="+ceilGiB(sm.HostPeakBytes()))
	fixed := sm
	fixed.HostBytes = 0
	if left := budget - fixed.HostPeakBytes(); sm.HostBytes > 0 && left > 0 {
		fit = append(fit, fmt.Sprintf("--checkpoint=auto, which offloads only what the GPU cannot hold and "+
			"at most the %s this budget leaves beside the model", report.Bytes(left)))
	}
	if sm.SnapshotHostBytes > 0 {
		fit = append(fit, fmt.Sprintf("no --checkpoint-dir (its pinned buffer takes %s)",
			report.Bytes(sm.SnapshotHostBytes)))
	}
	return fmt.Errorf("@%s does not fit the host: its plan holds %s on the host at its peak (%s), beside %s "+
		"per GPU, more than the %s of --host-memory-budget; it would fit with %s",
		f.Name, report.Bytes(sm.HostPeakBytes()), hostParts(sm), report.Bytes(sm.PeakBytes),
		report.Bytes(budget), strings.Join(fit, ", or "))
}

// hostParts lists a plan's host memory by part.
func hostParts(sm cost.StepMemory) string {
	resume := ""
	if sm.HostResumeBytes > 0 {
		resume = fmt.Sprintf("; %s with the checkpoint --resume loads", report.Bytes(sm.HostResumeBytes))
	}
	return fmt.Sprintf("the model as lcc holds it %s (%s once on the GPU%s), pinned offloaded activations %s, "+
		"pinned checkpoint buffer %s, the CUDA runtime %s", report.Bytes(sm.HostModelBytes),
		report.Bytes(sm.HostKeptBytes), resume, report.Bytes(sm.HostBytes), report.Bytes(sm.SnapshotHostBytes),
		report.Bytes(sm.HostRuntimeBytes))
}

// ceilGiB renders b rounded up to whole GiB (MiB below 1 GiB), as a flag value.
func ceilGiB(b int64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%dMiB", (b+(1<<20)-1)>>20)
	}
	return fmt.Sprintf("%dGiB", (b+(1<<30)-1)>>30)
}

// explain adds to checkpointing's refusal the host figures and the settings
// that would fit: the host budget an offload plan that fit the GPU needs, and
// the sequence length that would fit at the smallest plan's activations per
// token. f holds the smallest plan (passes.Recompute applies it).
func (m memoryModel) explain(f *ir.Func, err error, budget, hostBudget int64) error {
	var re *passes.RecomputeError
	if !errors.As(err, &re) {
		return err
	}
	var fit []string
	if o := re.Offload; o != nil && hostBudget > 0 && strings.Contains(re.Rejected, "host budget") {
		fit = append(fit, fmt.Sprintf("--checkpoint=auto and --host-memory-budget=%s (%s offloaded beside "+
			"the host's %s of %s)", ceilGiB(m.hostFixed(f)+o.OffloadedBytes),
			report.Bytes(o.OffloadedBytes), report.Bytes(m.hostFixed(f)), m.hostFixedParts()))
	}
	if n, how, ok := m.seqThatFits(f, re, budget, hostBudget); ok {
		fit = append(fit, fmt.Sprintf("about --seq-len=%d (%s, activations scaled to the budgets, rounded "+
			"down to a power of two)", n, how))
	}
	host := ""
	if hostBudget > 0 {
		host = fmt.Sprintf("; host: the %s take %s of the %s of --host-memory-budget",
			m.hostFixedParts(), report.Bytes(m.hostFixed(f)), report.Bytes(hostBudget))
	}
	if len(fit) == 0 {
		return fmt.Errorf("%w%s", err, host)
	}
	return fmt.Errorf("%w%s; it would fit with %s", err, host, strings.Join(fit, ", or "))
}

// seqThatFits estimates the longest sequence, a power of two below f's (dilated
// segments are), at which one of the plans auto evaluated fits: the part of a
// peak that does not grow with the sequence (the weights' working copy, their
// gradients, the optimizer state, the fixed costs) stays, activations and
// offloaded bytes scale with it. A fixed policy fits while its activations fit
// the GPU's budget; its "+offload" form may move up to all of its offloadable
// bytes to the host within what the host budget leaves (partial offload), so
// the GPU holds its in-device activations less what was moved. It returns the
// length, the plan it is for, and ok false when f has no bound sequence dim or
// no shorter sequence fits.
func (m memoryModel) seqThatFits(f *ir.Func, re *passes.RecomputeError, budget, hostBudget int64) (int64, string, bool) {
	seq := seqLenOf(f)
	if seq < 4 || !m.gpu() {
		return 0, "", false
	}
	prog, err := cudagen.Build(f, cudagen.Options{Arch: m.target.Arch, Storage: m.storage, Rank: m.rank})
	if err != nil {
		return 0, "", false
	}
	weights, grads := arenaParts(prog)
	opt := cost.OptimizerStateBytes(trainable(f))
	if m.hostState {
		opt = 0
	}
	w := float64(weights + grads + opt + cost.FixedBytes)
	b := float64(budget)
	host := math.Inf(1) // what the host budget leaves for offload
	if hostBudget > 0 {
		host = float64(hostBudget - m.hostFixed(f))
	}
	in := map[string]passes.RecomputeStats{}
	for _, p := range re.Plans {
		if !strings.HasSuffix(p.Policy, "+offload") {
			in[p.Policy] = p
		}
	}
	var best float64
	how := ""
	for _, p := range append([]passes.RecomputeStats{re.Smallest}, re.Plans...) {
		a := float64(p.PeakAfter) - w // activations on the GPU at seq
		if a <= 0 || b <= w {
			continue
		}
		scale := (b - w) / a // in-device: the activations fit at this fraction of seq
		name := p.Policy
		base, ok := in[strings.TrimSuffix(p.Policy, "+offload")]
		if o := float64(p.OffloadedBytes); ok && o > 0 && p.Offloaded == p.Offloadable && host > 0 {
			// GPU(s) = w + ain·s − min(host, o·s): moving all o·s fits until the host is full.
			ain := float64(base.PeakAfter) - w
			if s := host / o; w+(ain-o)*s <= b {
				scale = (b - w + host) / ain
			}
			name = p.Policy + " (--checkpoint=auto offloads what the GPU cannot hold)"
		}
		if scale > best {
			best, how = scale, name
		}
	}
	n := int64(best * float64(seq))
	if n < 2 {
		return 0, "", false
	}
	n = 1 << (63 - bits.LeadingZeros64(uint64(n)))
	return n, how, n < seq
}

// seqLenOf is the sequence dim bound in f's inputs (labelled by one of the
// names --seq-len binds), or 0.
func seqLenOf(f *ir.Func) int64 {
	for _, p := range f.Params {
		if p.Role != ir.RoleInput && p.Role != ir.RoleLabel {
			continue
		}
		t := p.Value.Type
		for i, l := range t.Labels {
			if slices.Contains(seqNames, l) {
				return t.Shape[i]
			}
		}
	}
	return 0
}
