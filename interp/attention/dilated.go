package attention

import (
	"errors"
	"fmt"

	"github.com/lcc-dev/lcc/ir"
)

// Branch is one LongNet branch: the sequence is cut into segments of Segment
// positions (w) and, inside each, every Dilation-th position (r) takes part.
type Branch struct{ Segment, Dilation int }

// Offsets chooses which residue modulo r a head selects in each branch.
type Offsets int

const (
	// Paper is LongNet's offset o(h) = h mod r: neighbouring heads cover
	// neighbouring residues. It is the default.
	Paper Offsets = iota
	// Block is torchscale's offset o(h) = min(⌊h/⌈H/r⌉⌋, r−1): heads are split into r
	// contiguous blocks, one per residue.
	Block
)

// String returns the name used in flags and IR attributes: "paper" or "block".
func (o Offsets) String() string {
	switch o {
	case Paper:
		return ir.OffsetsPaper
	case Block:
		return ir.OffsetsBlock
	}
	return fmt.Sprintf("Offsets(%d)", int(o))
}

// Offset is o(h) for head h of heads in a branch of dilation r. Dilated attention
// passes the query head and H = Hq, also under grouped-query attention.
func (o Offsets) Offset(h, heads, r int) int {
	if o != Paper && o != Block {
		panic(fmt.Sprintf("lcc: BUG: attention: unknown offsets %d", int(o)))
	}
	return int(ir.HeadOffset(o.String(), int64(h), int64(heads), int64(r)))
}

// DilatedConfig is a dilated attention: its branches, how heads pick their offsets,
// and whether a query sees only earlier keys (LongNet is causal; the zero value of
// Causal is false, so callers say so). Without Causal a selected query sees every
// selected key of its segment.
type DilatedConfig struct {
	Branches []Branch
	Offsets  Offsets
	Causal   bool
}

// docStart is the start of position p's document in batch b under starts [B,T]
// (0 when starts is nil: one document).
func docStart(starts []int64, d Dims, b, p int) int {
	if starts == nil {
		return 0
	}
	return int(starts[b*d.T+p])
}

// Validate reports whether c is usable: at least one branch, every segment and
// dilation ≥ 1, and known offsets.
func (c DilatedConfig) Validate() error {
	if len(c.Branches) == 0 {
		return errors.New("attention: dilated attention needs at least one branch")
	}
	for i, br := range c.Branches {
		if br.Segment < 1 || br.Dilation < 1 {
			return fmt.Errorf("attention: branch %d has segment %d and dilation %d, want both ≥ 1",
				i, br.Segment, br.Dilation)
		}
	}
	if c.Offsets != Paper && c.Offsets != Block {
		return fmt.Errorf("attention: unknown offsets %d, want paper or block", int(c.Offsets))
	}
	return nil
}

// branchKeys is what position p sees in branch br for a head with offset off over a
// sequence of n positions: the keys start+off, start+off+r, ... of p's segment
// (those ≤ p when causal). ok is false when p is not selected, i.e.
// (p mod w) mod r ≠ off; a selected p always sees itself. doc is the start of p's
// document (0 without packed documents): segments are cut from there, so a document
// is dilated exactly as it would be alone (docs/design.md §3, "Packed documents").
func branchKeys(p int, br Branch, off, n, doc int, causal bool) (ks keySet, ok bool) {
	w, r := br.Segment, br.Dilation
	start := doc + (p-doc)/w*w
	if (p-start)%r != off {
		return keySet{}, false
	}
	hi := n // the last segment may be shorter; w > n is one segment
	if n-start > w {
		hi = start + w
	}
	if causal {
		hi = p + 1
	}
	return keySet{lo: start + off, step: r, hi: hi}, true
}

// dilatedCheck validates the call; dilated attention is self-attention, so S == T.
func dilatedCheck(fn string, d Dims, cfg DilatedConfig) {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("lcc: BUG: %s: %v", fn, err))
	}
	if d.S != d.T {
		panic(fmt.Sprintf("lcc: BUG: %s: dilated attention needs S == T, got S=%d T=%d",
			fn, d.S, d.T))
	}
}

// offsets returns o(h) for every branch of cfg.
func (cfg DilatedConfig) offsets(h, heads int) []int {
	offs := make([]int, len(cfg.Branches))
	for i, br := range cfg.Branches {
		offs[i] = cfg.Offsets.Offset(h, heads, br.Dilation)
	}
	return offs
}

// DilatedDocs is causal Dilated over packed documents: starts [B,T] holds each
// position's document start, and every document is dilated as if it were alone
// (segments cut from its start, no key outside it). cfg.Causal must be set.
func DilatedDocs(q, k, v []float64, d Dims, cfg DilatedConfig, starts []int64, scale float64,
	r Rounding) (o, lse []float64) {
	d.mustMatch("attention.DilatedDocs", "q", q, "k", k, "v", v)
	dilatedCheck("attention.DilatedDocs", d, cfg)
	mustDocs("attention.DilatedDocs", d, starts, cfg.Causal)
	return dilatedForward(q, k, v, d, cfg, cfg.Branches, starts, scale, r)
}

// Dilated is LongNet dilated attention (docs/design.md §3). Query head h uses kv head h/g
// and, in each branch, offset cfg.Offsets.Offset(h, Hq, r) for both its query and its
// key rows. The branches' (O_i, LSE_i) are merged as LSE = log Σ_i exp(LSE_i),
// O = Σ_i exp(LSE_i − LSE)·O_i, which is one softmax over the union (with
// multiplicity) of the branches' key sets; a row that no branch selects gets o = 0 and
// lse = −Inf. S must equal T. It returns o [B,T,Hq,D] and lse [B,Hq,T].
func Dilated(q, k, v []float64, d Dims, cfg DilatedConfig, scale float64) (o, lse []float64) {
	d.mustMatch("attention.Dilated", "q", q, "k", k, "v", v)
	dilatedCheck("attention.Dilated", d, cfg)
	return dilatedForward(q, k, v, d, cfg, cfg.Branches, nil, scale, Rounding{})
}

// DilatedRounded is Dilated as the tensor-core kernels compute it, with the
// roundings r models in every branch (the zero Rounding gives Dilated).
func DilatedRounded(q, k, v []float64, d Dims, cfg DilatedConfig, scale float64,
	r Rounding) (o, lse []float64) {
	d.mustMatch("attention.DilatedRounded", "q", q, "k", k, "v", v)
	dilatedCheck("attention.DilatedRounded", d, cfg)
	return dilatedForward(q, k, v, d, cfg, cfg.Branches, nil, scale, r)
}

// DilatedBranch is branch i of Dilated alone: (O_i, LSE_i), with o = 0 and lse = −Inf
// on the rows the branch does not select. Folding MergeInto over every branch gives
// Dilated.
func DilatedBranch(q, k, v []float64, d Dims, cfg DilatedConfig, i int,
	scale float64) (o, lse []float64) {
	d.mustMatch("attention.DilatedBranch", "q", q, "k", k, "v", v)
	dilatedCheck("attention.DilatedBranch", d, cfg)
	if i < 0 || i >= len(cfg.Branches) {
		panic(fmt.Sprintf("lcc: BUG: attention.DilatedBranch: branch %d of %d", i,
			len(cfg.Branches)))
	}
	return dilatedForward(q, k, v, d, cfg, cfg.Branches[i:i+1], nil, scale, Rounding{})
}

// dilatedForward runs one goroutine per (batch, query head); each row merges the
// branches that select it, in branch order, with the overflow-free ring update.
func dilatedForward(q, k, v []float64, d Dims, cfg DilatedConfig, branches []Branch,
	starts []int64, scale float64, rd Rounding) (o, lse []float64) {
	o = make([]float64, len(q))
	lse = make([]float64, d.B*d.Hq*d.T)
	cfg.Branches = branches
	parallelFor(d.B*d.Hq, func(task int) {
		b, h := task/d.Hq, task%d.Hq
		kv := d.head(b, h/d.group(), k, v, nil, nil)
		offs := cfg.offsets(h, d.Hq)
		scores := make([]float64, d.T)
		branchO := make([]float64, d.D)
		for p := range d.T {
			r := d.qAt(b, p, h)
			acc := negInf // o[r:r+D] is 0, the value of a row no branch selected
			for i, br := range branches {
				ks, ok := branchKeys(p, br, offs[i], d.T, docStart(starts, d, b, p), cfg.Causal)
				if !ok {
					continue
				}
				l := forwardRow(q[r:r+d.D], kv, ks, nil, scale, rd, scores, branchO)
				acc = mergeRow(o[r:r+d.D], acc, branchO, l)
			}
			lse[d.lseAt(b, h, p)] = acc
		}
	})
	return o, lse
}
