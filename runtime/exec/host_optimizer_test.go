package exec

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
)

// TestGPUHostOptimizerMatchesResident runs the resident optimizer and the host
// optimizer side by side, each in its own session, over four steps of the same
// random gradients from the same state, with and without clipping, in fp32 and
// bf16 storage, and wants the same norms, state and working weights bit for
// bit; the host optimizer's Snapshot holds its Save's bytes.
func TestGPUHostOptimizerMatchesResident(t *testing.T) {
	dev := devicetest.Open(t)
	cache := t.TempDir()
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, clip := range []float64{0, 0.5} {
			for _, onDevice := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/clip%v/gpu-update=%v", st, clip, onDevice), func(t *testing.T) {
					hostOptimCase(t, dev, st, clip, onDevice, cache)
				})
			}
		}
	}
}

// hostOptimCase: the host optimizer (its update on the CPU, or on the GPU
// through windows of at most one chunk: slots reused, a window across two
// tensors, windows the kernels read four elements at a time and one at a time) gives the resident one's norms, state and working weights bit
// for bit.
func hostOptimCase(t *testing.T, dev *cuda.Device, st tensor.DType, clip float64, onDevice bool, cache string) {
	ws := optimWeights
	spec := OptimizerSpec{Weights: ws, Grads: optimGrads, Micro: 1, MaxNorm: clip}
	bind := func() *Bound {
		f := optimGraph(t, rand.New(rand.NewPCG(1, 2)))
		s := NewSession(dev, Options{Storage: st, CacheDir: cache})
		t.Cleanup(func() { s.Close() })
		b, err := s.Bind(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rb, hb := bind(), bind()
	res, err := rb.NewOptimizer(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	hs := HostOptimizerSpec{OptimizerSpec: spec, Threads: 3,
		Update: func(h AdamWStep, g, master, m, v []float32, coef float32, clip bool) {
			optim.StepScalars(h).Apply(g, master, m, v, coef, clip)
		}}
	if onDevice {
		hs.Update, hs.OnDevice, hs.Window = nil, true, codegen.OptimChunk
	}
	host, err := hb.NewHostOptimizer(hs)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	rnd := func(shape []int64, pos bool) *tensor.Tensor { return randF32(rng, shape, pos) }
	f := rb.f
	master, m, v := randState(rng, f, ws)
	for _, o := range []interface {
		Load(master, m, v []*tensor.Tensor) error
	}{res, host} {
		if err := o.Load(master, m, v); err != nil {
			t.Fatal(err)
		}
	}
	o := optim.DefaultAdamW()
	o.MaxNorm = clip
	for step := range 4 {
		feeds := map[string]*tensor.Tensor{}
		for k, w := range ws {
			g := rnd(f.Param(w).Value.Type.Shape, false)
			for j := range g.F {
				g.F[j] *= 1e-2
			}
			feeds[fmt.Sprintf("g%d", k)] = g
		}
		h := AdamWStep(o.Scalars(step, 3e-3))
		var norms [2]float64
		for _, b := range []*Bound{rb, hb} {
			if _, err := b.Step(feeds, "loss"); err != nil {
				t.Fatal(err)
			}
		}
		if norms[0], err = res.Step(h); err != nil {
			t.Fatal(err)
		}
		if norms[1], err = host.Step(h); err != nil {
			t.Fatal(err)
		}
		if norms[0] != norms[1] {
			t.Fatalf("step %d: norm %v resident, %v host", step+1, norms[0], norms[1])
		}
	}
	rm, rmo, rv, err := res.Save()
	if err != nil {
		t.Fatal(err)
	}
	hm, hmo, hv, err := host.Save()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]*tensor.Tensor{rm, rmo, rv}
	for i, got := range [][]*tensor.Tensor{hm, hmo, hv} {
		for k := range got {
			if !slices.Equal(got[k].Encode(), want[i][k].Encode()) {
				t.Errorf("state %d of %s: host and resident differ", i, ws[k])
			}
		}
	}
	// The working weights in the arenas, after the host's upload.
	for _, w := range ws {
		var raws [2][]byte
		for i, b := range []*Bound{rb, hb} {
			p, buf, err := b.Buffer(w)
			if err != nil {
				t.Fatal(err)
			}
			raws[i] = make([]byte, buf.Bytes)
			if err := b.s.stream.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := cuda.CopyDtoH(dev, raws[i], p); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(raws[0], raws[1]) {
			t.Errorf("working %s: host and resident differ", w)
		}
	}
	snapBuf, err := dev.AllocHost(host.SnapshotBytes())
	if err != nil {
		t.Fatal(err)
	}
	defer snapBuf.Free()
	snap, err := host.Snapshot(snapBuf, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Wait(); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, snap, want, "snapshot")
	if err := snap.Release(); err != nil {
		t.Fatal(err)
	}
	t.Logf("last host step: %s", host.LastSplit())
}

// TestStreamWindows: the streamed update's windows are runs of whole chunks
// of at most the limit (a chunk longer than it alone), in order, covering
// every element once.
func TestStreamWindows(t *testing.T) {
	_, _, cl := codegen.OptimChunks([]int64{185, 2*8192 + 3, 1})
	got := streamWindows(cl, codegen.OptimChunk)
	want := []streamWindow{{0, 1, 0, 185}, {1, 2, 185, 185 + 8192}, {2, 3, 185 + 8192, 185 + 2*8192},
		{3, 5, 185 + 2*8192, 185 + 2*8192 + 4}}
	if !slices.Equal(got, want) {
		t.Errorf("windows %v, want %v", got, want)
	}
	if got := streamWindows(cl, 1<<30); len(got) != 1 || got[0] != (streamWindow{0, 5, 0, 185 + 2*8192 + 4}) {
		t.Errorf("one window: %v", got)
	}
	if got := streamWindows(cl, 100); len(got) != 4 || got[3] != (streamWindow{3, 5, 185 + 2*8192, 185 + 2*8192 + 4}) {
		t.Errorf("a limit below three chunks: %v, want them alone and the last two together", got)
	}
	if got := streamWindows(nil, 100); len(got) != 0 {
		t.Errorf("no chunks: %v", got)
	}
}
