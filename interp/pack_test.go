package interp

import (
	"runtime"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestPackedRunIsExact: the tiny GPT's forward and backward in f32, with values at
// rest packed in float32 (Run), gives bit for bit what the run holding every value
// in float64 (RunValues) gives, bf16 storage too; and the estimate of the packed
// run's peak is lower than that of the same run unpacked.
func TestPackedRunIsExact(t *testing.T) {
	const T = 128
	f := tinyGPT(t, T)
	in := gptInputs(T)
	for _, opts := range []Options{{}, {Store: func(*ir.Value) tensor.DType { return tensor.BF16 }}} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := Run(f, in, opts)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		all, err := RunValues(f, in, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range f.Outputs {
			if !tensor.Equal(got[o.Name], all[o.Value]) {
				t.Errorf("%s differs packed", o.Name)
			}
		}
		t.Logf("packed run allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
	}
	last, outputs := liveness(f)
	n := 0
	for i, nd := range f.Body {
		for _, r := range nd.Results {
			if packs(r, i, last, outputs) {
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("the tiny GPT packs no value: the test tests nothing")
	}
	peak, _ := HostPeak(f)
	unpacked, _ := hostPeak(f, false)
	if peak >= unpacked {
		t.Errorf("estimated peak %d bytes packed, %d unpacked", peak, unpacked)
	}
	t.Logf("%d values packed; estimated peak %d bytes, %d unpacked", n, peak, unpacked)
}
