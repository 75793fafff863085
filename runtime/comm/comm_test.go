package comm

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCollectives(t *testing.T) {
	w := NewWorld(4, time.Second)
	err := w.Run(func(e *Endpoint) error {
		r := float64(e.Rank())
		all, err := e.AllGather("ag", []int64{2}, []float64{r, 10 * r})
		if err != nil {
			return err
		}
		for s, x := range all {
			if !slices.Equal(x, []float64{float64(s), 10 * float64(s)}) {
				t.Errorf("rank %d: all_gather part %d = %v", e.Rank(), s, x)
			}
		}
		parts := make([][]float64, 4)
		for d := range parts {
			parts[d] = []float64{100*r + float64(d)}
		}
		got, err := e.AllToAll("a2a", parts)
		if err != nil {
			return err
		}
		for s, x := range got {
			if x[0] != 100*float64(s)+r {
				t.Errorf("rank %d: all_to_all from %d = %v", e.Rank(), s, x)
			}
		}
		x, err := e.SendRecv("ring", []float64{r}, (e.Rank()+1)%4, (e.Rank()+3)%4)
		if err != nil {
			return err
		}
		if x[0] != float64((e.Rank()+3)%4) {
			t.Errorf("rank %d: ring got %v", e.Rank(), x)
		}
		sum, err := e.AllReduce("ar", []int64{1}, []float64{r}, "sum")
		if err != nil {
			return err
		}
		if sum[0] != 6 {
			t.Errorf("rank %d: all_reduce = %v", e.Rank(), sum)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Mismatched shapes, mismatched collectives and missing ranks are errors that
// name the op and the ranks, within the timeout; nothing hangs.
func TestMismatchesAreErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func(e *Endpoint) error
		want []string
	}{
		{"shape", func(e *Endpoint) error {
			_, err := e.AllGather(`all_gather "l0"`, []int64{int64(1 + e.Rank())}, make([]float64, 1+e.Rank()))
			return err
		}, []string{`all_gather "l0"`, "shape", "rank"}},
		{"different op", func(e *Endpoint) error {
			op := "all_reduce"
			if e.Rank() == 1 {
				op = "all_to_all"
			}
			_, err := e.AllGather(op, nil, []float64{1})
			return err
		}, []string{"different programs", "rank"}},
		{"missing rank", func(e *Endpoint) error {
			if e.Rank() == 2 {
				return nil
			}
			_, err := e.AllGather("node_matmul_1", nil, []float64{1})
			return err
		}, []string{"node_matmul_1", "timed out", "waiting for rank 2"}},
	} {
		start := time.Now()
		err := NewWorld(3, 100*time.Millisecond).Run(c.fn)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("%s: took %v", c.name, time.Since(start))
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		if errors.Is(err, ErrAborted) {
			t.Errorf("%s: the cause should be reported, not the abort: %v", c.name, err)
		}
	}
}
