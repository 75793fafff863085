package commtest

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// DeviceScript runs every device collective of comm.Device on c, this rank's
// communicator on dev, with m f32 elements per rank and block, outputs poisoned
// (NaN) first, and compares each result with the same collective computed on the
// host from every rank's inputs (Values; sums in rank order, so bit for bit):
// all_gather, all_reduce (sum), reduce_scatter, send_recv to the next rank,
// all_to_all, and an all_reduce (max) in place. Every rank must run it.
func DeviceScript(dev *cuda.Device, c comm.Device, m int) error {
	n, r := c.Size(), c.Rank()
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
	// sync waits for the collectives queued so far.
	sync := func() error {
		ev, err := c.Done()
		if err != nil {
			return err
		}
		defer ev.Destroy()
		return ev.Synchronize()
	}
	// input uploads this rank's part of call (n·m values) and returns every
	// rank's, from which the host computes the result.
	input := func(call int) ([][]float32, error) {
		all := make([][]float32, n)
		for x := range n {
			for _, v := range Values(x, call, n*m) {
				all[x] = append(all[x], float32(v))
			}
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
	check := func(what string, got cuda.DevicePtr, want []float32) error {
		if err := sync(); err != nil {
			return err
		}
		out := make([]float32, len(want))
		if err := cuda.CopyDtoH(dev, out, got); err != nil {
			return err
		}
		for i := range want {
			if out[i] != want[i] && !(out[i] != out[i] && want[i] != want[i]) {
				return fmt.Errorf("%s: element %d: got %v, want %v", what, i, out[i], want[i])
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
	if err := check("all_gather", recv, want); err != nil {
		return err
	}
	if all, err = input(2); err != nil {
		return err
	}
	if err := c.AllReduceDevice("all_reduce", send, recv, n*m, tensor.F32, cuda.Sum); err != nil {
		return err
	}
	if err := check("all_reduce", recv, sum(all, 0, n*m)); err != nil {
		return err
	}
	if all, err = input(3); err != nil {
		return err
	}
	if err := c.ReduceScatterDevice("reduce_scatter", send, recv, m, tensor.F32, cuda.Sum); err != nil {
		return err
	}
	if err := check("reduce_scatter", recv, sum(all, r*m, m)); err != nil {
		return err
	}
	if all, err = input(4); err != nil {
		return err
	}
	if err := c.SendRecvDevice("send_recv", send, m, (r+1)%n, recv, m, (r-1+n)%n, tensor.F32); err != nil {
		return err
	}
	if err := check("send_recv", recv, all[(r-1+n)%n][:m]); err != nil {
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
	if err := check("all_to_all", recv, want); err != nil {
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
	return check("all_reduce in place", send, mx)
}
