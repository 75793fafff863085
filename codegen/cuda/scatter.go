package cuda

import (
	"fmt"
	"math/bits"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// scatter_add (the embedding gradient) is sort-based, deterministic and
// O(N log N) for N indices, with no floating-point atomics:
//
//  1. keys: each index, wrapped (negative counts from the end) into [0, size],
//     size standing for "out of range, matches nothing", paired with its position.
//  2. a stable LSD radix sort of (key, position) by 8-bit digits (Satish, Harris
//     and Garland, "Designing efficient sorting algorithms for manycore GPUs",
//     IPDPS 2009), one warp per tile of the input: per digit pass a histogram per
//     tile, one exclusive scan over (digit, tile) and a scatter in which each warp
//     walks its tile in order and ranks equal digits with __match_any_sync, so
//     equal keys keep their positions' order. Integer counts only: the order is
//     the same on every run.
//  3. the start and end of each key's run in the sorted order.
//  4. one block per output row sums its run's rows in sorted (that is, position)
//     order in the accumulator type, with 16-byte loads where the row allows.
//
// The result equals the CPU interpreter's order of summation (row-major in idx)
// and is bitwise reproducible. Scratch: four int32 arrays of N, the histogram
// (256 × tiles int32) and two int32 arrays of size.

// scatterWarps is the number of warps (tiles) per block of the sort kernels.
// Each warp walks its own tile in order, so the block size changes speed only,
// never the result.
const scatterWarps = 8

// scatterKeyBody makes the sort keys and positions.
const scatterKeyBody = "    long long k = (long long)idx[i]; if (k < 0) k += %[1]d;\n" +
	"    if (k < 0 || k >= %[1]d) k = %[1]d;\n" +
	"    key[i] = (int)k; val[i] = (int)i;\n"

// scatterHistBody counts each tile's digits.
const scatterHistBody = `// scatter_add sort: digit histogram of %[1]d keys, tiles of %[2]d, digit shift %[4]d
#define NI %[1]dLL
#define TILE %[2]dLL
#define UNITS %[3]dLL
#define SHIFT %[4]d
#define WPB %[5]d
extern "C" __global__ void __launch_bounds__(WPB * 32) @KERNEL@(int* hist, const int* key) {
  __shared__ int h[WPB][256];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long u = (long long)blockIdx.x * WPB + w;
  if (u >= UNITS) return;
  for (int d = lane; d < 256; d += 32) h[w][d] = 0;
  __syncwarp();
  const long long e = lcc_min(u * TILE + TILE, NI);
  for (long long i = u * TILE + lane; i < e; i += 32) atomicAdd(&h[w][(key[i] >> SHIFT) & 255], 1);
  __syncwarp();
  for (int d = lane; d < 256; d += 32) hist[(long long)d * UNITS + u] = h[w][d];
}
`

// scatterScanBody turns the (digit, tile) counts into exclusive offsets: one
// block, each thread a contiguous stretch, then a scan of the stretches' sums.
const scatterScanBody = `// scatter_add sort: exclusive scan of %[1]d counts
#define M %[1]dLL
extern "C" __global__ void __launch_bounds__(1024) @KERNEL@(int* hist) {
  __shared__ int sh[1024];
  const int t = threadIdx.x;
  const long long per = (M + 1023) / 1024;
  const long long b = lcc_min(t * per, M), e = lcc_min(b + per, M);
  int s = 0;
  for (long long i = b; i < e; ++i) s += hist[i];
  sh[t] = s;
  __syncthreads();
  for (int o = 1; o < 1024; o <<= 1) {
    const int v = t >= o ? sh[t - o] : 0;
    __syncthreads();
    sh[t] += v;
    __syncthreads();
  }
  int run = sh[t] - s;
  for (long long i = b; i < e; ++i) { const int c = hist[i]; hist[i] = run; run += c; }
}
`

// scatterMoveBody is one stable digit pass: each warp places its tile's keys in
// order; lanes with equal digits rank among themselves by lane.
const scatterMoveBody = `// scatter_add sort: stable scatter of %[1]d keys by the digit at shift %[4]d
#define NI %[1]dLL
#define TILE %[2]dLL
#define UNITS %[3]dLL
#define SHIFT %[4]d
#define WPB %[5]d
extern "C" __global__ void __launch_bounds__(WPB * 32) @KERNEL@(int* okey, int* oval, const int* key, const int* val, const int* hist) {
  __shared__ int cnt[WPB][256];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long u = (long long)blockIdx.x * WPB + w;
  if (u >= UNITS) return;
  for (int d = lane; d < 256; d += 32) cnt[w][d] = hist[(long long)d * UNITS + u];
  __syncwarp();
  const long long e = lcc_min(u * TILE + TILE, NI);
  for (long long i0 = u * TILE; i0 < e; i0 += 32) {
    const long long i = i0 + lane;
    const bool act = i < e;
    const int k = act ? key[i] : 0, v = act ? val[i] : 0;
    const int d = act ? (k >> SHIFT) & 255 : 256 + lane;
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (act) {
      const int p = cnt[w][d] + rank;
      okey[p] = k;
      oval[p] = v;
    }
    __syncwarp();
    if (act && rank == 0) cnt[w][d] += __popc(peers);
    __syncwarp();
  }
}
`

// scatterBoundsBody records where each key's run starts and ends.
const scatterBoundsBody = "    const int k = key[i];\n" +
	"    if (k < %[1]d) {\n" +
	"      if (i == 0 || key[i - 1] != k) start[k] = (int)i;\n" +
	"      if (i == %[2]d - 1 || key[i + 1] != k) end[k] = (int)i + 1;\n" +
	"    }\n"

// scatterSumBody sums each output row's run in sorted order.
const scatterSumBody = `// scatter_add %[1]s: one block per output row, runs summed in position order
#define NI %[2]dLL
#define SIZE %[3]dLL
#define INNER %[4]dLL
#define VEC %[5]d
#define NT %[6]d
typedef %[7]s XT;
typedef %[8]s YT;
typedef %[9]s ACC;
extern "C" __global__ void __launch_bounds__(NT) @KERNEL@(%[10]s) {
  const long long j = blockIdx.x, o = blockIdx.y;
  const int b = start[j], e = end[j];
  for (long long c = threadIdx.x; c < INNER / VEC; c += NT) {
    ACC acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] = 0;
#pragma unroll 4
    for (int i = b; i < e; ++i) {
      const XT* src = x + ((o * NI + (long long)val[i]) * INNER + c * VEC);
#if VEC > 1
      float v[VEC];
      lcc_ld16(src, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] += v[k];
#else
      acc[0] += (ACC)%[11]s;
#endif
    }
    YT* dst = y + ((o * SIZE + j) * INNER + c * VEC);
#if VEC > 1
    lcc_st16(dst, acc);
#else
    dst[0] = %[12]s;
#endif
  }
}
`

// lowerScatterAdd renders the sort-based scatter_add described above.
func lowerScatterAdd(g *gen, n *ir.Node) error {
	x, idx, y := n.Args[0], n.Args[1], n.Result()
	ax := n.AttrInt("axis")
	size := n.AttrInt("size")
	ni := idx.Type.Numel()
	outer := prod(x.Type.Shape[:ax])
	inner := prod(x.Type.Shape[int(ax)+idx.Type.Rank():])
	if y.Type.Numel() == 0 {
		return nil
	}
	// Keys and positions are int32 to halve the sort's traffic, and outer rides on
	// gridDim.y, capped at 65535.
	if ni >= 1<<31-1 || size >= 1<<31-1 || outer >= 1<<16 {
		return fmt.Errorf("scatter_add with %d indices into %d rows (outer %d): the GPU sort takes fewer than 2^31 of each and outer dims below 65536", ni, size, outer)
	}
	xdt, ydt := g.storageOf(x), g.storageOf(y)
	// The sum kernel loads and stores one storage type; a cast belongs in the graph.
	if xdt != ydt {
		return fmt.Errorf("scatter_add stores x as %v and y as %v: want one dtype", xdt, ydt)
	}
	// Rows no index hits must read an empty run (start = end = 0), so both arrays
	// are cleared first; the bounds kernel only writes rows that occur.
	start, end := g.temp(tensor.I32, size), g.temp(tensor.I32, size)
	g.flatKernel("scatter_add.zero", fmt.Sprintf("scatter_add: empty runs for %d rows", size), size,
		[]Param{{Name: "start", CType: "int", Out: true}, {Name: "end", CType: "int", Out: true}},
		[]int{start, end}, "    start[i] = 0; end[i] = 0;\n")
	var val int
	if ni > 0 {
		val = g.scatterSort(idx, ni, size, start, end)
	} else {
		// No indices: every run is empty and val is never read, but the parameter needs
		// a buffer.
		val = g.temp(tensor.I32, 1)
	}
	vec := vecLanes(xdt, inner)
	nt := pow2(inner/vec, 32, 256)
	params := []Param{g.param("y", y, true), g.param("x", x, false), {Name: "val", CType: "int"},
		{Name: "start", CType: "int"}, {Name: "end", CType: "int"}}
	acc := accC(y.Type.DType)
	body := fmt.Sprintf(scatterSumBody, fmt.Sprintf("%v by %v at axis %d into %v", x.Type, idx.Type, ax, y.Type),
		ni, size, inner, vec, nt, storageC[xdt], storageC[ydt], acc, signature(params),
		load(xdt, "src[0]"), store(ydt, "acc[0]"))
	// One block per output row and outer slice: rows are independent, so no two
	// blocks write the same element.
	g.emit(kernelSpec{op: "scatter_add", body: body, grid: [3]uint32{uint32(size), uint32(outer), 1},
		block: [3]uint32{uint32(nt), 1, 1}, params: params,
		args: []int{g.ids[y], g.ids[x], val, start, end}})
	return nil
}

// scatterSort emits the key, radix-sort and bounds kernels for ni indices into
// size rows, fills the start and end buffers, and returns the buffer of sorted
// positions.
func (g *gen) scatterSort(idx *ir.Value, ni, size int64, start, end int) int {
	// Double buffers: each digit pass reads one and writes the other (ping-pong).
	key := [2]int{g.temp(tensor.I32, ni), g.temp(tensor.I32, ni)}
	val := [2]int{g.temp(tensor.I32, ni), g.temp(tensor.I32, ni)}
	g.flatKernel("scatter_add.keys", fmt.Sprintf("scatter_add: sort keys of %v into %d rows", idx.Type, size), ni,
		[]Param{{Name: "key", CType: "int", Out: true}, {Name: "val", CType: "int", Out: true},
			g.param("idx", idx, false)}, []int{key[0], val[0], g.ids[idx]}, fmt.Sprintf(scatterKeyBody, size))
	// Tiles of at least 1024 keys, at most 1024 tiles: the scan stays one block.
	tile := max(1024, (ni+1023)/1024)
	// Whole warps of keys per tile, so __match_any_sync always sees 32 valid lanes
	// except in the last tile.
	tile = (tile + 31) / 32 * 32
	units := (ni + tile - 1) / tile
	hist := g.temp(tensor.I32, 256*units)
	blocks := uint32((units + scatterWarps - 1) / scatterWarps)
	// Only the digits size needs: a vocabulary of 32768 takes two passes, not four.
	passes := (bits.Len64(uint64(size)) + 7) / 8
	cur := 0
	for p := range passes {
		shift := 8 * p
		g.emit(kernelSpec{op: "scatter_add.hist", body: fmt.Sprintf(scatterHistBody, ni, tile, units, shift, scatterWarps),
			grid: [3]uint32{blocks, 1, 1}, block: [3]uint32{32 * scatterWarps, 1, 1},
			params: []Param{{Name: "hist", CType: "int", Out: true}, {Name: "key", CType: "int"}},
			args:   []int{hist, key[cur]}})
		g.emit(kernelSpec{op: "scatter_add.scan", body: fmt.Sprintf(scatterScanBody, 256*units),
			grid: [3]uint32{1, 1, 1}, block: [3]uint32{1024, 1, 1},
			params: []Param{{Name: "hist", CType: "int", Out: true}}, args: []int{hist}})
		g.emit(kernelSpec{op: "scatter_add.move", body: fmt.Sprintf(scatterMoveBody, ni, tile, units, shift, scatterWarps),
			grid: [3]uint32{blocks, 1, 1}, block: [3]uint32{32 * scatterWarps, 1, 1},
			params: []Param{{Name: "okey", CType: "int", Out: true}, {Name: "oval", CType: "int", Out: true},
				{Name: "key", CType: "int"}, {Name: "val", CType: "int"}, {Name: "hist", CType: "int"}},
			args: []int{key[1-cur], val[1-cur], key[cur], val[cur], hist}})
		cur = 1 - cur
	}
	g.flatKernel("scatter_add.bounds", fmt.Sprintf("scatter_add: runs of %d sorted keys", ni), ni,
		[]Param{{Name: "start", CType: "int", Out: true}, {Name: "end", CType: "int", Out: true},
			{Name: "key", CType: "int"}}, []int{start, end, key[cur]}, fmt.Sprintf(scatterBoundsBody, size, ni))
	return val[cur]
}
