// Package flash renders lcc's tensor-core attention kernels (FlashAttention-2's
// algorithm on mma.sync, "tier 1", sm_80 and later) from one kernel descriptor,
// Desc. Every kernel of the family (forward, delta, dK/dV, dQ, and the fp32
// merge and conversion helpers of dilated and ring attention) is rendered with
// text/template from the same Desc, so the same descriptor always gives the same
// bytes.
//
// Layouts follow the attention op (docs/design.md §3): q and o are [B, T, Hq, D], k and
// v [B, S, Hkv, D], all bf16; lse and delta are [B, Hq, T] fp32 in natural-log
// units. A dilated branch (W, R) reads its selected rows in place: in segment s
// and head h the kernel sees rows s·W + o(h) + i·R, i = 0, 1, ..., as one causal
// sequence. A ring block shifts the causal mask by QPos and KPos (global
// positions of row 0 of q and of k).
//
// The kernels define their own bf16 helpers and inline PTX (mma.sync m16n8k16,
// ldmatrix, cp.async), so NVRTC 11.8 alone compiles them for compute_80 and sm_90.
package flash

import (
	"errors"
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/tensor"
)

// Desc describes one attention problem and how to tile it. The zero values of
// the optional fields mean dense attention over the whole sequence.
type Desc struct {
	// Tier is the kernel tier: 1 (mma.sync, sm_80 and later) or 2 (wgmma,
	// sm_90a: Hopper only; its kernels say so in Kernel.Arch). 0 means 1.
	// Tier 2 renders the forward and the fused backward (DQFused) on wgmma;
	// the split backward (ring blocks) stays tier 1's.
	Tier int
	// DType is the storage of q, k, v, o and their gradients: bf16 (the zero
	// value means bf16). lse, delta and accumulators are fp32.
	DType tensor.DType
	// LT is the length of lse's and delta's time axis (0 means T): a dilated
	// backward run in row chunks (T rows from q's row 0, lse and delta shifted
	// by the chunk's start) reads them with the whole sequence's stride.
	LT int64
	// B, T, S are the batch, the query length and the key length; Hq and Hkv the
	// query and key/value heads (Hq = G·Hkv, grouped-query attention reads kv head
	// h/G without repeating it); D the head dim (a multiple of 8 up to 128: see KD).
	B, T, S int64
	Hq, Hkv int
	D       int
	Causal  bool
	// Docs adds the mask of packed documents (ir/docs.go): the forward and the
	// fused backward take the doc starts, [B, T] int64, as their last argument;
	// query t sees key j iff starts[t] ≤ j ≤ t. A query tile's key loop starts at
	// its first row's start, and a key tile's query walk ends at the first query
	// whose start lies past the tile, so the tiles between documents are skipped,
	// not masked. Dense causal attention with the fused backward only: not a
	// dilated branch, a ring block nor the split dQ.
	Docs bool
	// Window, when positive, is a sliding window (ir/window.go): query t sees
	// keys t−Window < j ≤ t. It is a first visible key per query like a
	// document start, computed instead of read, and combines with Docs (the
	// later start): the forward's key loop starts at its first row's start and
	// the backward's query walk ends where the window has passed the key tile,
	// so the tiles outside the window are skipped. The same cases as Docs.
	Window int64
	Scale  float64 // 0 means 1/sqrt(D)
	// Br and Bc are the forward's query and key tile rows; Stages the number of
	// K/V tiles in flight (2: double buffering). Each forward warp owns WM m-tiles
	// of 16 query rows (1 or 2: two halve the shared-memory reads of K and V per
	// FLOP), so the forward has Br/(16·WM) warps.
	Br, Bc, Stages int
	WM             int
	// BwdBr and BwdBc tile the backward: the dK/dV kernel owns BwdBc keys and
	// walks query tiles of BwdBr rows; the dQ kernel owns BwdBr·2 queries... see
	// DQBr and DQBc.
	BwdBr, BwdBc int
	DQBr, DQBc   int
	DQWM         int // m-tiles of 16 query rows per dQ warp (1 or 2)
	// W and R make a LongNet branch: segments of W rows, every R-th row from the
	// head's offset (Offsets "paper": h mod R; "block": min(h / ceil(H/R), R−1)).
	// W = 0 means one segment over the whole sequence, R = 0 means 1.
	W       int64
	R       int
	Offsets string
	// QPos and KPos are the global positions of q's and k's first row (ring
	// blocks): causal masking compares QPos+i with KPos+j.
	QPos, KPos int64
	// Accumulate makes the kernels merge into fp32 outputs instead of writing
	// bf16: the forward merges (o, lse) into a running fp32 (o, lse) (ring blocks,
	// dilated branches), the backward adds dq, dk, dv into fp32 sums (dilated
	// branches, in a fixed order). The backward always reads an external lse and
	// delta: the global ones for the exact backward of docs/design.md §3.
	Accumulate bool
	// First (with Accumulate and the fused backward) makes the dK/dV kernel
	// store its fp32 sums instead of adding to them: the first branch of a
	// dilated backward, when it selects every row (dilation 1), so the sums
	// need no zeroing.
	First bool
	// PerMember restricts the dK/dV kernel to query head Member of each group:
	// in a dilated branch the q heads of one kv head may select different rows, so
	// their dK/dV run one launch per member, accumulating in a fixed order.
	PerMember bool
	Member    int
	// SplitHeads runs the fused backward one CTA per (key tile, query head)
	// instead of per (key tile, kv head): a grouped-query key tile's walk over
	// its group's G heads becomes G walks side by side, so that the CTAs near the
	// causal diagonal's start (the longest walks, G·T/BwdBr items) no longer
	// make the kernel's tail. Each writes its head's part of dK and dV in fp32
	// (Desc.SplitWorkspace), and DKVReduce sums a group's parts in head order:
	// the same bits every run.
	SplitHeads bool
	// DQ chooses how the backward computes dQ: DQFused fuses it into the dK/dV
	// kernel (dense or grouped-query attention, or a dilated branch without
	// grouped-query heads; with Accumulate dK and dV add into fp32 sums and dQ
	// into the fixed-point workspace, which perf/flash.Dilated shares across
	// its branches),
	// DQSplit runs the separate dQ kernel, which recomputes S and dP; DQAuto
	// (the zero value) is the faster on the H200 (BENCHMARKS.md).
	DQ DQMode
	// DQAdds bounds how many key tiles add into one element of the fused
	// backward's dQ sum when launches share its workspace (the branches of a
	// dilated backward: their key tiles together); 0 means this launch's own,
	// ceil(rows/BwdBc). Tier 2's sum is exact only up to a count of adds
	// (dqLowBits), so the count sets its unit.
	DQAdds int64
	// Views places q, k and v (read) and dq, dk and dv (written) inside larger
	// buffers: codegen's read views and placed values, so that a fused qkv
	// projection's q, k and v are read where its GEMM wrote them and their
	// gradients are written into the qkv gradient, with no copies. The zero
	// value is each tensor's own buffer. Dense attention with the fused
	// backward only: not a dilated branch, a ring block nor the split dQ.
	Views Views
}

// Views says where q, k, v, dq, dk and dv live (Desc.Views).
type Views struct{ Q, K, V, DQ, DK, DV Layout }

// Layout is where a [B, rows, heads, D] tensor of the attention op lives:
// element (b, t, h, d) is element Off + b·Batch + t·Row + h·D + d of the buffer
// the kernel is given. A head's D elements and a row's heads stay contiguous,
// as a projection's output has them. The zero Layout is the tensor's own
// buffer, row-major.
type Layout struct{ Off, Row, Batch int64 }

// own reports whether l is the tensor's own buffer.
func (l Layout) own() bool { return l == Layout{} }

// of fills in the row-major strides of a tensor of rows × heads × d where l
// leaves them zero.
func (l Layout) of(rows int64, heads, d int) Layout {
	if l.Row == 0 {
		l.Row = int64(heads) * int64(d)
	}
	if l.Batch == 0 {
		l.Batch = rows * l.Row
	}
	return l
}

// layouts are q's, k's, v's, dq's, dk's and dv's layouts with their strides
// filled in, in that order (the header's FA_Q*, FA_K*, ... macros).
func (d Desc) layouts() [6]Layout {
	w := d.Views
	return [6]Layout{w.Q.of(d.T, d.Hq, d.D), w.K.of(d.S, d.Hkv, d.D), w.V.of(d.S, d.Hkv, d.D),
		w.DQ.of(d.T, d.Hq, d.D), w.DK.of(d.S, d.Hkv, d.D), w.DV.of(d.S, d.Hkv, d.D)}
}

// viewed reports whether any tensor of d lives in another's buffer.
func (d Desc) viewed() bool { return d.Views != Views{} }

// viewNames are the tensors of Views, in layouts' order.
var viewNames = [6]string{"q", "k", "v", "dq", "dk", "dv"}

// checkViews says why d's views cannot be run, or nil.
func (d Desc) checkViews() error {
	if !d.viewed() {
		return nil
	}
	if d.Accumulate || d.Dilated() || d.QPos != 0 || d.KPos != 0 || !d.Fused() {
		return errors.New("views of q, k, v and their gradients: dense attention with the fused backward only")
	}
	for i, l := range d.layouts() {
		rows, heads := d.T, d.Hq
		if i%3 != 0 { // k, v, dk, dv
			rows, heads = d.S, d.Hkv
		}
		if err := l.Check(d.B, rows, heads, d.D); err != nil {
			return fmt.Errorf("view of %s: %w", viewNames[i], err)
		}
	}
	return nil
}

// Check says why the kernels cannot index a [batch, rows, heads, d] tensor
// laid out as l (strides filled in), or nil: they move 16 bytes at a time, so
// every row starts on 8 elements, and rows and batches must not overlap.
func (l Layout) Check(batch, rows int64, heads, d int) error {
	if l.Off < 0 || l.Off%8 != 0 || l.Row%8 != 0 || l.Batch%8 != 0 || l.Row < int64(heads)*int64(d) ||
		(batch > 1 && l.Batch < rows*l.Row) {
		return fmt.Errorf("offset %d, rows %d apart, batches %d apart: want multiples of 8 "+
			"that keep the rows and batches apart", l.Off, l.Row, l.Batch)
	}
	return nil
}

// DQMode is how the backward computes dQ.
type DQMode int

const (
	// DQAuto fuses dense attention (faster on the H200 at every shape of
	// BENCHMARKS.md) and splits dilated branches and ring blocks (Accumulate),
	// whose dQ sums across launches.
	DQAuto DQMode = iota
	// DQFused: the dK/dV kernel also computes dS·K for each query tile and adds
	// it into a 64-bit fixed-point dQ sum with integer atomics (red.add.u64),
	// then ConvertDQ rounds the sum to bf16. Integer addition is associative, so
	// the sum is bitwise the same in any order: deterministic without ordering
	// the CTAs. Five GEMM-sized products per tile instead of seven. The fixed
	// point's unit comes from a bound on |dQ| (DQBound), so the sum cannot
	// overflow and keeps at least 62 bits below the bound.
	DQFused
	// DQSplit: the dQ kernel recomputes S and dP per query tile.
	DQSplit
)

// Fused reports whether the backward of d fuses dQ into the dK/dV kernel.
func (d Desc) Fused() bool {
	switch d.DQ {
	case DQFused:
		return true
	case DQSplit:
		return false
	}
	return !d.Accumulate && !d.Dilated()
}

// DQWorkspace is the number of 32-bit words a fused backward needs besides
// its outputs: the int64 dQ sum ([B,T,Hq,D], two words an element) followed
// by DQBoundWords words of maxima for its bound. All start at zero.
func (d Desc) DQWorkspace() int64 {
	return 2*d.B*d.T*int64(d.Hq)*int64(d.D) + DQBoundWords
}

// dqSplitFloat reports whether the fused dQ sum is tier 2's pair of fp32
// words (hi, lo) an element, added two elements at a time with one
// red.global.add.v4.f32, rather than tier 1's int64 (red.add.u64). Both are
// fixed points: the words hold integers, so every partial sum is exact and the
// sum has the same bits in any order. The L2's atomics cost by their count
// (BENCHMARKS.md, 2026-12-02), and the pair halves it.
func (d Desc) dqSplitFloat() bool { return d.Tier == 2 }

// dqLowBits is K of tier 2's split-float dQ sum (d after Defaults): an
// element's value is hi·2^K + lo units, |lo| ≤ 2^(K−1) per add, so that n adds
// of lo stay below 2^23 (K = 24 − ⌈log2 n⌉), and the unit puts the bound at
// 2^(22+K), so that hi's sum stays below 2^23 too. Each word is an integer
// below 2^24 at every partial sum: exact in fp32.
func (d Desc) dqLowBits() int {
	n := d.DQAdds
	if n <= 0 {
		n = (d.keyRows() + int64(d.BwdBc) - 1) / int64(d.BwdBc)
	}
	k := 24
	for x := int64(1); x < n; x *= 2 {
		k--
	}
	return max(k, 1)
}

// SplitWorkspace is the fp32 elements of SplitHeads' parts of dK and dV:
// [B, S, Hq, D] each, dK's then dV's.
func (d Desc) SplitWorkspace() int64 { return 2 * d.B * d.S * int64(d.Hq) * int64(d.D) }

// tierSMs is the SMs of each tier's GPUs: the A100's for tier 1 (an sm_80
// target), the H100's and H200's for tier 2.
var tierSMs = map[int]int64{1: 108, 2: 132}

// SplitsHeads is the rule for SplitHeads (d after Defaults): split a
// grouped-query fused backward when its unsplit grid has fewer CTAs than the
// SMs. A causal key tile's walk at k0 = 0 is the longest, G·T/BwdBr items,
// and each SM's mean share of all the walks is about n/2 of those for n CTAs
// an SM, so the longest walk sets the kernel's time once n < 2: then the
// kernel takes 2/n of what its work needs. Split, the longest walk is T/BwdBr,
// G times shorter. The parts cost a write and a read of fp32 dK and dV for
// every query head, so the rule splits only where the tail at least doubles
// the time (n < 1: fewer CTAs than SMs, as with few kv heads or one), not at
// the 1.1B Llama's 256 CTAs at 8K, where n ≈ 2 and the gain would be small.
func SplitsHeads(d Desc) bool {
	if d.Hq == d.Hkv || !d.Fused() || d.Accumulate || d.Dilated() || d.QPos != 0 || d.KPos != 0 {
		return false
	}
	ctas := d.B * int64(d.Hkv) * ((d.S + int64(d.BwdBc) - 1) / int64(d.BwdBc))
	return ctas < tierSMs[d.Tier]
}

// DQBoundWords is the size of the maxima at the end of the fused workspace:
// max |dO|, max |K|, max |V| (bf16 elements) and max |delta|, as float bits.
const DQBoundWords = 4

// Defaults fills tile sizes and the optional fields left zero.
func (d Desc) Defaults() Desc {
	if d.Tier == 0 {
		d.Tier = 1
	}
	if d.DType == tensor.Invalid {
		d.DType = tensor.BF16
	}
	if d.Scale == 0 {
		d.Scale = 1 / math.Sqrt(float64(d.D))
	}
	// Tiles measured best on an H200, causal (BENCHMARKS.md): D=128 forward
	// 128×32 with two m-tiles per warp (dilated branches, ring blocks), dense
	// 256×32 with two m-tiles (three stages when fused) when there are at least 1024
	// such query tiles (T=32K, 8 heads), else 128×64 with one m-tile per warp
	// (more CTAs for short sequences); dK/dV 32 queries × 128 keys (fused: 64
	// × 128), dQ 128×32 with two m-tiles per warp; D=64 forward 256×64, dK/dV
	// 64×128, dQ 128×64, two m-tiles per warp.
	wide := d.D > 64
	if d.KD() > 128 && d.Br == 0 && d.Bc == 0 && d.WM == 0 {
		// Head dim 256 (Gemma's): a forward warp keeps one m-tile's 16 rows ×
		// 256 fp32 accumulators (128 registers) and reads Q from shared memory
		// (FA_QREG), over 32-key tiles; the fused backward takes 32 queries × 64
		// keys, so that each warp's dK and dV sums (16 keys × 128 columns) fit.
		d.Br, d.Bc, d.WM = 64, 32, 1
		if d.Stages == 0 {
			d.Stages = 2
		}
		if d.BwdBr == 0 && d.BwdBc == 0 {
			d.BwdBr, d.BwdBc = 32, 64
		}
	}
	if d.Tier == 2 && d.Br == 0 && d.Bc == 0 {
		// Three warpgroups of 64 query rows over 64-key tiles (D=128) or
		// 128-key tiles (D=64), measured best on an H200 (BENCHMARKS.md: 32K
		// causal, 4.64 ms against 5.28 for 128×128), and three K/V stages: the
		// forward's P·V keeps reading one while the next loads land.
		d.Br, d.Bc = 192, 128
		if wide {
			d.Bc = 64
		} else if d.Accumulate {
			// The fp32 merge's registers on top of 192×128 spill under the
			// 168 registers of three warpgroups: two warpgroups instead.
			d.Br = 128
		}
	}
	if d.Tier == 2 && d.Stages == 0 {
		d.Stages = 3
	}
	if wide && !d.Dilated() && !d.Accumulate && d.Br == 0 && d.Bc == 0 && d.WM == 0 {
		if (d.T+255)/256*int64(d.Hq)*d.B >= 1024 {
			d.Br, d.Bc, d.WM = 256, 32, 2
			if d.Stages == 0 && d.Fused() {
				d.Stages = 3 // the split backward's dQ kernel is slower with three
			}
		} else {
			d.Br, d.Bc, d.WM = 128, 64, 1
		}
	}
	pick := func(p *int, d128, d64 int) {
		if *p == 0 {
			*p = d64
			if wide {
				*p = d128
			}
		}
	}
	pick(&d.Br, 128, 256)
	pick(&d.Bc, 32, 64)
	pick(&d.WM, 2, 2)
	pick(&d.Stages, 2, 2)
	if d.Fused() && d.Tier == 1 && wide && (d.Docs || d.Window > 0) {
		// A document mask's or a window's per-element starts take the 64-query
		// fused backward past 255 registers at D=128 (spills, TestNoSpills);
		// 32 queries keep it in registers.
		pick(&d.BwdBr, 32, 32)
	}
	if d.Fused() {
		pick(&d.BwdBr, 64, 64)
	}
	pick(&d.BwdBr, 32, 64)
	pick(&d.BwdBc, 128, 128)
	pick(&d.DQBr, 128, 128)
	pick(&d.DQBc, 32, 64)
	pick(&d.DQWM, 2, 2)
	if d.W == 0 {
		d.W = d.T
	}
	if d.LT == 0 {
		d.LT = d.T
	}
	if d.R == 0 {
		d.R = 1
	}
	if d.Offsets == "" {
		d.Offsets = "paper"
	}
	return d
}

// SegmentRows is the rows a segment of w positions selects at dilation r
// from a sequence of t: ⌈min(w, t)/r⌉, where w ≤ 0 means the whole sequence.
func SegmentRows(w, t int64, r int) int64 {
	if w <= 0 || w > t {
		w = t
	}
	return (w + int64(r) - 1) / int64(r)
}

// queryRows is the query rows one launch of d (after Defaults) walks: the
// sequence's, or a dilated segment's.
func (d Desc) queryRows() int64 {
	if d.Dilated() {
		return SegmentRows(d.W, d.T, d.R)
	}
	return d.T
}

// keyRows is the key rows one launch of d (after Defaults) walks.
func (d Desc) keyRows() int64 {
	if d.Dilated() {
		return SegmentRows(d.W, d.T, d.R)
	}
	return d.S
}

// Dilated reports whether d is a LongNet branch (rows selected with a stride or
// in segments shorter than the sequence).
func (d Desc) Dilated() bool { return d.R > 1 || (d.W > 0 && d.W < d.T) }

// Members is the dK/dV launches of d: d itself, or, for a dilated branch with
// grouped-query heads (whose q heads of one kv head may select different rows),
// one PerMember copy for each member of the group, in member order.
func (d Desc) Members() []Desc {
	g := d.Hq / d.Hkv
	if !d.Dilated() || g <= 1 {
		return []Desc{d}
	}
	out := make([]Desc, g)
	for m := range out {
		out[m] = d
		out[m].PerMember, out[m].Member = true, m
	}
	return out
}

// KD is the head dim the kernels compute with: 64, 128 or 256. Another head
// dim, a multiple of 8 (80, 96, 112; 32 or 48 of small models), runs on the
// kernels of the next of those, FA_D in their source, over the model's own rows
// of D (FA_DG): the loads fill the columns from D on with zeros in shared
// memory, which leaves every score and every product of the first D columns as
// they are (a zero column adds nothing to a dot product), and the stores write
// the first D columns only. It costs KD/D of the work and no memory.
func (d Desc) KD() int {
	switch {
	case d.D <= 64:
		return 64
	case d.D <= 128:
		return 128
	}
	return 256
}

// Segments is the number of segments per sequence.
func (d Desc) Segments() int64 { return (d.T + d.W - 1) / d.W }

// TierForHeadDim is the tier that head dim d runs on when tier is asked for: tier
// 2's kernels stop at a computed head dim of 128 (KD), so above it every
// variant runs on tier 1. Codegen (FlashDescOf) and lcc bench take this rule.
func TierForHeadDim(tier, d int) int {
	if d > 128 {
		return 1
	}
	return tier
}

// Supported reports whether the tensor-core tier takes d, and why not.
func Supported(d Desc) error {
	if d.D <= 0 || d.D > 256 || d.D%8 != 0 {
		return fmt.Errorf("head dim %d: the tensor-core kernels take a multiple of 8 up to 256", d.D)
	}
	if d.Hkv <= 0 || d.Hq%d.Hkv != 0 {
		return fmt.Errorf("%d query heads over %d kv heads: want a whole group", d.Hq, d.Hkv)
	}
	return nil
}

// Check validates a Desc after Defaults.
func (d Desc) Check() error {
	if err := Supported(d); err != nil {
		return err
	}
	if d.DType != tensor.BF16 {
		return fmt.Errorf("storage %v: the tensor-core kernels take bf16", d.DType)
	}
	if d.Tier != 1 && d.Tier != 2 {
		return fmt.Errorf("tier %d: want 1 (mma.sync) or 2 (wgmma, sm_90a)", d.Tier)
	}
	if d.KD() > 128 && (d.Tier != 1 || !d.Fused() || d.Accumulate || d.Dilated() || d.QPos != 0 || d.KPos != 0) {
		return fmt.Errorf("head dim %d: above 128 the tensor-core kernels run dense attention on tier 1 "+
			"with the fused backward only (not tier 2, a dilated branch, a ring block or the split dQ)", d.D)
	}
	if d.Tier == 2 && d.Stages < 3 {
		return fmt.Errorf("tier 2: %d stages: the forward needs at least 3", d.Stages)
	}
	if d.Tier == 2 && (d.Br != 64 && d.Br != 128 && d.Br != 192 || d.Bc != 64 && d.Bc != 128) {
		return fmt.Errorf("tier 2 forward tile %d×%d: want 64, 128 or 192 queries (warpgroups of 64) × 64 or 128 keys", d.Br, d.Bc)
	}
	if d.B <= 0 || d.T <= 0 || d.S <= 0 {
		return fmt.Errorf("shape B=%d T=%d S=%d: want positive sizes", d.B, d.T, d.S)
	}
	if d.B*d.Segments() > 65535 || d.Hq > 65535 {
		return fmt.Errorf("batch×segments %d or heads %d exceed the grid limit 65535", d.B*d.Segments(), d.Hq)
	}
	if d.Dilated() && d.S != d.T {
		return fmt.Errorf("dilated attention needs as many keys as queries, got T=%d, S=%d", d.T, d.S)
	}
	for _, t := range []struct {
		name string
		v    int
	}{{"Br", d.Br}, {"Bc", d.Bc}, {"BwdBr", d.BwdBr}, {"BwdBc", d.BwdBc}, {"DQBr", d.DQBr}, {"DQBc", d.DQBc}} {
		if t.v < 16 || t.v > 256 || t.v%16 != 0 {
			return fmt.Errorf("tile %s=%d: want a multiple of 16 in [16, 256]", t.name, t.v)
		}
	}
	if d.WM != 1 && d.WM != 2 || d.Br%(16*d.WM) != 0 {
		return fmt.Errorf("forward: %d m-tiles per warp with Br=%d: want 1 or 2 dividing Br/16", d.WM, d.Br)
	}
	if d.DQWM != 1 && d.DQWM != 2 || d.DQBr%(16*d.DQWM) != 0 {
		return fmt.Errorf("dQ: %d m-tiles per warp with DQBr=%d: want 1 or 2 dividing DQBr/16", d.DQWM, d.DQBr)
	}
	if d.Stages < 2 || d.Stages > 4 {
		return fmt.Errorf("stages %d: want 2..4", d.Stages)
	}
	if d.PerMember && (d.Member < 0 || d.Member >= d.Hq/d.Hkv) {
		return fmt.Errorf("group member %d: want 0..%d", d.Member, d.Hq/d.Hkv-1)
	}
	if d.DQ == DQFused && d.Dilated() && d.Hq != d.Hkv {
		return fmt.Errorf("fused dQ: a dilated branch with grouped-query heads (its members select different rows)")
	}
	if d.First && !(d.Accumulate && d.Fused()) {
		return fmt.Errorf("first: a fused backward with Accumulate only")
	}
	if d.LT < d.T {
		return fmt.Errorf("lse and delta of %d rows: want at least T=%d", d.LT, d.T)
	}
	if d.DQ < DQAuto || d.DQ > DQSplit {
		return fmt.Errorf("dQ mode %d: want auto, fused or split", d.DQ)
	}
	if err := d.checkViews(); err != nil {
		return err
	}
	if d.Tier == 2 && d.Fused() && (d.BwdBr != 64 || d.BwdBc != 128) {
		return fmt.Errorf("tier 2 fused backward tiles %d×%d: the two warpgroups take 64 queries × 128 keys", d.BwdBr, d.BwdBc)
	}
	if d.Fused() && (d.BwdBr != 32 && d.BwdBr != 64 || d.BwdBc != 64 && d.BwdBc != 128) {
		return fmt.Errorf("fused dQ: backward tiles %d×%d: the eight warps take 32 or 64 queries × 64 or 128 keys", d.BwdBr, d.BwdBc)
	}
	if d.Docs && (!d.Causal || d.Dilated() || d.Accumulate || d.QPos != 0 || d.KPos != 0 || !d.Fused()) {
		return fmt.Errorf("document mask: dense causal attention with the fused backward only " +
			"(not a dilated branch, a ring block or the split dQ)")
	}
	if d.Window < 0 {
		return fmt.Errorf("window %d: want a positive number of keys, or 0 for none", d.Window)
	}
	if d.Window > 0 && (!d.Causal || d.Dilated() || d.Accumulate || d.QPos != 0 || d.KPos != 0 || !d.Fused()) {
		return fmt.Errorf("sliding window: dense causal attention with the fused backward only " +
			"(not a dilated branch, a ring block or the split dQ)")
	}
	if d.SplitHeads && (!d.Fused() || d.Accumulate || d.Dilated() || d.Hq == d.Hkv || d.QPos != 0 || d.KPos != 0) {
		return fmt.Errorf("split heads: the fused backward of dense grouped-query attention only")
	}
	if d.Offsets != "paper" && d.Offsets != "block" {
		return fmt.Errorf("offsets %q: want paper or block", d.Offsets)
	}
	return nil
}
