// Package commtest is the conformance script of collective.Communicator
// interface: every transport (in-process, TCP, NCCL) runs it on every rank, and
// its results must be the in-process communicator's, bit for bit. DeviceScript
// is the same for the device collectives of comm.Device (NCCL, devlocal).
package commtest

import (
	"fmt"
	"github.com/lcc-dev/lcc/collective"
	"math"

	"github.com/lcc-dev/lcc/runtime/comm"
)

// Values returns n numbers of mixed signs and magnitudes (so that the order of a
// sum shows in its bits), different for each rank and call.
func Values(rank, call, n int) []float64 {
	out := make([]float64, n)
	x := uint64(rank*7919+call*104729) | 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		u := float64(x>>11) / (1 << 53)
		out[i] = (u - 0.5) * math.Pow(10, float64(int(x%7))-3)
	}
	return out
}

// Script runs every collective of the interface on c (all_gather with and
// without shapes, all_to_all, ring send/recv both ways, all_reduce sum/max/min,
// reduce_scatter) and returns every result in order. Every rank must run it.
func Script(c collective.Communicator) ([][]float64, error) {
	n, r := c.Size(), c.Rank()
	var out [][]float64
	call := 0
	next := func(m int) []float64 { call++; return Values(r, call, m) }
	add := func(xs ...[]float64) { out = append(out, xs...) }

	all, err := c.AllGather("commtest/all_gather", []int64{2, 3}, next(6))
	if err != nil {
		return nil, err
	}
	add(all...)
	// Sizes that differ by rank (LongNet's sparse gather of selected rows).
	if all, err = c.AllGather("commtest/all_gather_ragged", nil, next(1+r)); err != nil {
		return nil, err
	}
	add(all...)
	parts := make([][]float64, n)
	for d := range parts {
		parts[d] = next(5)
	}
	if all, err = c.AllToAll("commtest/all_to_all", parts); err != nil {
		return nil, err
	}
	add(all...)
	for _, shift := range []int{1, n - 1} {
		x, err := c.SendRecv(fmt.Sprintf("commtest/ring%+d", shift), next(33), (r+shift)%n, (r-shift+n)%n)
		if err != nil {
			return nil, err
		}
		add(x)
	}
	for _, red := range []string{"sum", "max", "min"} {
		x, err := c.AllReduce("commtest/all_reduce_"+red, []int64{1000}, next(1000), red)
		if err != nil {
			return nil, err
		}
		add(x)
	}
	for d := range parts {
		parts[d] = next(257)
	}
	x, err := c.ReduceScatter("commtest/reduce_scatter", parts, "sum")
	if err != nil {
		return nil, err
	}
	add(x)
	return out, nil
}

// Reference runs Script on n in-process ranks and returns each rank's results.
func Reference(n int) ([][][]float64, error) {
	res := make([][][]float64, n)
	w := comm.NewWorld(n, 0)
	err := w.Run(func(e *comm.Endpoint) error {
		out, err := Script(e)
		res[e.Rank()] = out
		return err
	})
	return res, err
}

// Diff describes the first difference between got and want, or returns "".
func Diff(rank int, got, want [][]float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("rank %d: %d results, want %d", rank, len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			return fmt.Sprintf("rank %d: result %d has %d elements, want %d", rank, i, len(got[i]),
				len(want[i]))
		}
		for j := range want[i] {
			if math.Float64bits(got[i][j]) != math.Float64bits(want[i][j]) {
				return fmt.Sprintf("rank %d: result %d[%d] = %v, want %v", rank, i, j, got[i][j], want[i][j])
			}
		}
	}
	return ""
}
