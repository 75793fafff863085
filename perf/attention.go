package perf

import (
	"fmt"
	"strconv"
	"strings"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/perf/flash"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// AttentionShape is one attention benchmark: bf16, [B, T, H, D] queries over
// [B, T, Hkv, D] keys and values.
type AttentionShape struct {
	B, T   int64
	H, Hkv int
	D      int
	Causal bool
	// Docs packs that many documents of (nearly) equal length into each
	// sequence, causal within each (0 or 1: one document, no mask).
	Docs int
	// Window, when positive, is a sliding window of that many keys (causal):
	// query t sees keys t−Window < j ≤ t.
	Window int64
}

// FwdFLOPs counts the forward's useful FLOPs as the anchors do: 4·B·H·T²·D,
// halved when causal, and summed over the documents' own lengths when packed.
// A window W < l counts l·W − W²/2 query-key pairs of a document of l tokens
// instead of l²/2. Forward+backward is 3.5 times that.
func (s AttentionShape) FwdFLOPs() float64 {
	var sq float64
	for _, l := range s.docLens() {
		if w := s.Window; w > 0 && w < l {
			sq += 2*float64(l)*float64(w) - float64(w)*float64(w)
			continue
		}
		sq += float64(l) * float64(l)
	}
	f := 4 * float64(s.B) * float64(s.H) * sq * float64(s.D)
	if s.Causal {
		f /= 2
	}
	return f
}

// docLens is the length of each packed document, the first ones one longer when
// T does not divide: T itself without documents.
func (s AttentionShape) docLens() []int64 {
	n := int64(max(s.Docs, 1))
	ls := make([]int64, n)
	for i := range ls {
		ls[i] = s.T / n
		if int64(i) < s.T%n {
			ls[i]++
		}
	}
	return ls
}

// DocStarts is the doc-starts operand of s's packing, [B, T]: each position's
// document start (ir/docs.go).
func (s AttentionShape) DocStarts() []int64 {
	st := make([]int64, 0, s.B*s.T)
	lens := s.docLens()
	for range s.B {
		pos := int64(0)
		for _, l := range lens {
			for range l {
				st = append(st, pos)
			}
			pos += l
		}
	}
	return st
}

// Tiles are the tile sizes of one kernel configuration (zero: the default),
// the kernel tier (0: tier 1; see TierFor), and Split 1 for tier 2's backward
// one CTA per query head (flash.Desc.SplitHeads).
type Tiles struct{ Br, Bc, BwdBr, BwdBc, DQBr, DQBc, Stages, WM, DQWM, DQ, Tier, Split int }

// TierFor is the flash tier lcc picks for dev, as the executor does.
func TierFor(dev *cuda.Device) int { return fk.TierFor(dev.CodegenArch()) }

// ParseTiles reads "Br,Bc,BwdBr,BwdBc,DQBr,DQBc,Stages[,WM,DQWM[,DQ[,Tier[,Split]]]];..."
// (a sweep list; WM and DQWM are the m-tiles of 16 rows per forward and dQ
// warp, DQ the backward's dQ mode: 0 auto, 1 fused into dK/dV, 2 its own
// kernel; Tier the kernel tier, 0 for the device's; Split 1 splits tier 2's
// grouped-query backward by query head).
func ParseTiles(s string) ([]Tiles, error) {
	var out []Tiles
	for _, item := range strings.Split(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f := strings.Split(item, ",")
		if len(f) != 7 && len(f) != 9 && len(f) != 10 && len(f) != 11 && len(f) != 12 {
			return nil, fmt.Errorf("tiles %q: want Br,Bc,BwdBr,BwdBc,DQBr,DQBc,Stages[,WM,DQWM[,DQ[,Tier[,Split]]]]", item)
		}
		var v [12]int
		for i, x := range f {
			n, err := strconv.Atoi(strings.TrimSpace(x))
			if err != nil {
				return nil, fmt.Errorf("tiles %q: %v", item, err)
			}
			v[i] = n
		}
		if v[9] < 0 || v[9] > 2 {
			return nil, fmt.Errorf("tiles %q: dQ mode %d: want 0 (auto), 1 (fused) or 2 (split)", item, v[9])
		}
		if v[10] < 0 || v[10] > 2 {
			return nil, fmt.Errorf("tiles %q: tier %d: want 0 (the device's), 1 or 2", item, v[10])
		}
		if v[11] < 0 || v[11] > 1 {
			return nil, fmt.Errorf("tiles %q: split %d: want 0 or 1", item, v[11])
		}
		out = append(out, Tiles{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]})
	}
	return out, nil
}

func (t Tiles) String() string {
	dq := fmt.Sprintf("dq %dx%d/%d", t.DQBr, t.DQBc, max(t.DQWM, 1))
	switch fk.DQMode(t.DQ) {
	case fk.DQFused:
		dq = "dq fused"
	case fk.DQAuto:
		dq += " auto"
	case fk.DQSplit:
		dq += " split"
	}
	split := ""
	if t.Split == 1 {
		split = " split heads"
	}
	return fmt.Sprintf("tier %d fwd %dx%d/%d bwd %dx%d %s st %d%s", max(t.Tier, 1), t.Br, t.Bc, max(t.WM, 1), t.BwdBr,
		t.BwdBc, dq, t.Stages, split)
}

// Desc is the kernel descriptor of shape s with tiles t.
func (s AttentionShape) Desc(t Tiles) fk.Desc {
	return fk.Desc{B: s.B, T: s.T, S: s.T, Hq: s.H, Hkv: s.Hkv, D: s.D, Causal: s.Causal, Docs: s.Docs > 1,
		Window: s.Window, Br: t.Br, Bc: t.Bc, BwdBr: t.BwdBr, BwdBc: t.BwdBc, DQBr: t.DQBr, DQBc: t.DQBc, Stages: t.Stages,
		WM: t.WM, DQWM: t.DQWM, DQ: fk.DQMode(t.DQ), Tier: t.Tier, SplitHeads: t.Split == 1}.Defaults()
}

// Bench is the device state shared by the benchmarks of one command.
type Bench struct {
	Dev         *cuda.Device
	Stream      *cuda.Stream
	Cache       *cuda.Cache
	Warm, Iters int
	frees       []cuda.DevicePtr
}

// Close frees what the benchmarks allocated.
func (b *Bench) Close() {
	for _, p := range b.frees {
		b.Dev.Free(p)
	}
	b.frees = nil
}

// Alloc allocates bytes on the device, freed by Close.
func (b *Bench) Alloc(bytes int64) (cuda.DevicePtr, error) {
	p, err := b.Dev.Alloc(int(bytes))
	if err != nil {
		return 0, fmt.Errorf("perf: allocating %d bytes: %w", bytes, err)
	}
	b.frees = append(b.frees, p)
	return p, nil
}

// Free releases the buffers allocated since mark (a length of the free list).
func (b *Bench) freeFrom(mark int) {
	for _, p := range b.frees[mark:] {
		b.Dev.Free(p)
	}
	b.frees = b.frees[:mark]
}

// RandomBF16 allocates n bf16 values, normal-ish (a sum of uniforms) with a
// fixed seed: a 1M-element block generated on the host, tiled on the device.
func (b *Bench) RandomBF16(n int64, seed uint64) (cuda.DevicePtr, error) {
	p, err := b.Alloc(2 * n)
	if err != nil {
		return 0, err
	}
	const block = 1 << 20
	h := make([]uint16, min(n, block))
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range h {
		var s float32
		for j := 0; j < 4; j++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			s += float32(x>>40) / float32(1<<24)
		}
		f := (s - 2) * 1.7320508 // variance 1
		h[i] = uint16(mathFloat32bits(f) >> 16)
	}
	if err := cuda.CopyHtoD(b.Dev, p, h); err != nil {
		return 0, err
	}
	for off := int64(len(h)); off < n; off += int64(len(h)) {
		m := min(int64(len(h)), n-off)
		if err := b.Dev.CopyDtoD(p+cuda.DevicePtr(2*off), p, int(2*m)); err != nil {
			return 0, err
		}
	}
	return p, nil
}

// AttentionRow is one tile configuration's measurement.
type AttentionRow struct {
	Tiles            Tiles
	Fwd, Bwd, FwdBwd Timing
	DKDV, DQ         Timing // the backward's two main kernels alone
}

// Attention times the tensor-core kernels at shape s for each tile
// configuration: the forward, the backward alone (delta, dK/dV, dQ) and both.
func (b *Bench) Attention(s AttentionShape, tiles []Tiles) ([]AttentionRow, error) {
	mark := len(b.frees)
	defer b.freeFrom(mark)
	nq := s.B * s.T * int64(s.H) * int64(s.D)
	nk := s.B * s.T * int64(s.Hkv) * int64(s.D)
	nl := s.B * int64(s.H) * s.T
	var ptr [11]cuda.DevicePtr // q k v do o lse dq dk dv delta
	sizes := []int64{0, 0, 0, 0, 2 * nq, 4 * nl, 2 * nq, 2 * nk, 2 * nk, 4 * nl}
	for i, n := range []int64{nq, nk, nk, nq} {
		p, err := b.RandomBF16(n, uint64(i+1))
		if err != nil {
			return nil, err
		}
		ptr[i] = p
	}
	for i := 4; i < len(sizes); i++ {
		p, err := b.Alloc(sizes[i])
		if err != nil {
			return nil, err
		}
		ptr[i] = p
	}
	q, k, v, do, o, lse, dq, dk, dv, delta := ptr[0], ptr[1], ptr[2], ptr[3], ptr[4], ptr[5], ptr[6], ptr[7], ptr[8], ptr[9]
	var starts cuda.DevicePtr
	if s.Docs > 1 {
		h := s.DocStarts()
		p, err := b.Alloc(8 * int64(len(h)))
		if err != nil {
			return nil, err
		}
		if err := cuda.CopyHtoD(b.Dev, p, h); err != nil {
			return nil, err
		}
		starts = p
	}
	var rows []AttentionRow
	for _, t := range tiles {
		a, err := flash.New(b.Dev, b.Cache, s.Desc(t))
		if err != nil {
			return rows, fmt.Errorf("perf: attention %+v, %v: %w", s, t, err)
		}
		a.Starts = starts
		fwd := func() error { return a.Forward(b.Stream, o, lse, q, k, v) }
		bwd := func() error { return a.Backward(b.Stream, dq, dk, dv, q, k, v, o, lse, do, delta) }
		row := AttentionRow{Tiles: t}
		if row.Fwd, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, fwd); err == nil {
			if row.Bwd, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, bwd); err == nil {
				row.FwdBwd, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, func() error {
					if err := fwd(); err != nil {
						return err
					}
					return bwd()
				})
			}
		}
		if err == nil {
			if row.DKDV, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, func() error {
				return a.DKDV(b.Stream, dk, dv, q, k, v, lse, delta, do)
			}); err == nil {
				row.DQ, err = Time(b.Dev, b.Stream, b.Warm, b.Iters, func() error {
					return a.DQ(b.Stream, dq, q, k, v, lse, delta, do)
				})
			}
		}
		a.Close()
		if err != nil {
			return rows, fmt.Errorf("perf: attention %+v, %v: %w", s, t, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Result converts a row to lcc's figures at shape s.
func (r AttentionRow) Result(s AttentionShape) Result {
	f := s.FwdFLOPs()
	return Result{Who: "lcc", Note: r.Tiles.String(), Figures: []Figure{
		{Phase: "fwd", Ms: r.Fwd.Ms(), TFLOPs: f / r.Fwd.Ms() / 1e9},
		{Phase: "bwd", Ms: r.Bwd.Ms(), TFLOPs: 2.5 * f / r.Bwd.Ms() / 1e9},
		{Phase: "fwdbwd", Ms: r.FwdBwd.Ms(), TFLOPs: 3.5 * f / r.FwdBwd.Ms() / 1e9},
	}}
}
