package devlocal

// Tests named TestGPU* need a GPU and skip, saying why, without one.

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// values is rank r's input of a call: mixed signs and magnitudes, so the order
// of a sum shows in its bits.
func values(r, call, n int) []float32 {
	out := make([]float32, n)
	x := uint32(r*7919+call*104729) | 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		out[i] = (float32(x%2000) - 1000) / float32(1+int(x>>28))
	}
	return out
}

// TestGPUCollectives runs every device collective on 2 and 4 ranks sharing GPU
// 0, outputs poisoned first, and compares each rank's result with the same
// collective computed on the host (sums in rank order: bit for bit).
func TestGPUCollectives(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("skipping: no usable GPU: %v", err)
	}
	dev.Close()
	cache, err := cuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n, " ranks"), func(t *testing.T) {
			w := NewWorld(n, 30*time.Second, cache)
			const m = 1000 // elements per rank and block
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					errs[r] = collectivesRank(w, r, n, m)
					if errs[r] != nil {
						w.Abort(errs[r])
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// collectivesRank is rank r of TestGPUCollectives.
func collectivesRank(w *World, r, n, m int) error {
	dev, err := cuda.Open(0)
	if err != nil {
		return err
	}
	defer dev.Close()
	c, err := w.Comm(dev, r)
	if err != nil {
		return err
	}
	defer c.Close()
	send, err := dev.Alloc(4 * n * m)
	if err != nil {
		return err
	}
	defer dev.Free(send)
	recv, err := dev.Alloc(4 * n * m)
	if err != nil {
		return err
	}
	defer dev.Free(recv)
	// input uploads rank x's part of call (n·m values), and want the result.
	input := func(call int) ([][]float32, error) {
		all := make([][]float32, n)
		for x := range n {
			all[x] = values(x, call, n*m)
		}
		if err := cuda.CopyHtoD(dev, send, all[r]); err != nil {
			return nil, err
		}
		if err := dev.Memset32(recv, 0x7fc00000, n*m); err != nil {
			return nil, err
		}
		// The memset runs on the legacy stream, which the communicator's
		// non-blocking stream does not wait for.
		return all, dev.Synchronize()
	}
	check := func(what string, want []float32) error {
		if err := c.Sync(); err != nil {
			return err
		}
		got := make([]float32, len(want))
		if err := cuda.CopyDtoH(dev, got, recv); err != nil {
			return err
		}
		for i := range want {
			if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
				return fmt.Errorf("%s: element %d: got %v, want %v", what, i, got[i], want[i])
			}
		}
		return nil
	}
	sum := func(parts [][]float32, off, cnt int) []float32 {
		out := slices.Clone(parts[0][off : off+cnt])
		for _, p := range parts[1:] {
			for i := range out {
				out[i] += p[off+i]
			}
		}
		return out
	}
	all, err := input(1)
	if err != nil {
		return err
	}
	if err := c.AllGatherDevice("all_gather", send, recv, m, tensor.F32); err != nil {
		return err
	}
	var want []float32
	for x := range n {
		want = append(want, all[x][:m]...)
	}
	if err := check("all_gather", want); err != nil {
		return err
	}
	if all, err = input(2); err != nil {
		return err
	}
	if err := c.AllReduceDevice("all_reduce", send, recv, n*m, tensor.F32, cuda.Sum); err != nil {
		return err
	}
	if err := check("all_reduce", sum(all, 0, n*m)); err != nil {
		return err
	}
	if all, err = input(3); err != nil {
		return err
	}
	if err := c.ReduceScatterDevice("reduce_scatter", send, recv, m, tensor.F32, cuda.Sum); err != nil {
		return err
	}
	if err := check("reduce_scatter", sum(all, r*m, m)); err != nil {
		return err
	}
	if all, err = input(4); err != nil {
		return err
	}
	if err := c.SendRecvDevice("send_recv", send, m, (r+1)%n, recv, m, (r-1+n)%n, tensor.F32); err != nil {
		return err
	}
	if err := check("send_recv", all[(r-1+n)%n][:m]); err != nil {
		return err
	}
	if all, err = input(5); err != nil {
		return err
	}
	counts, offs := make([]int, n), make([]int, n)
	for i := range n {
		counts[i], offs[i] = m, i*m
	}
	if err := c.AllToAllDevice("all_to_all", send, counts, offs, recv, counts, offs, tensor.F32); err != nil {
		return err
	}
	want = nil
	for x := range n {
		want = append(want, all[x][r*m:(r+1)*m]...)
	}
	if err := check("all_to_all", want); err != nil {
		return err
	}
	// In place: every rank reduces into its own input.
	if all, err = input(6); err != nil {
		return err
	}
	if err := c.AllReduceDevice("all_reduce in place", send, send, n*m, tensor.F32, cuda.Max); err != nil {
		return err
	}
	mx := slices.Clone(all[0])
	for _, p := range all[1:] {
		for i := range mx {
			mx[i] = max(mx[i], p[i])
		}
	}
	if err := c.Sync(); err != nil {
		return err
	}
	got := make([]float32, n*m)
	if err := cuda.CopyDtoH(dev, got, send); err != nil {
		return err
	}
	if !slices.Equal(got, mx) {
		return fmt.Errorf("all_reduce in place: got %v..., want %v...", got[:4], mx[:4])
	}
	return nil
}
