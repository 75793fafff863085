package cuda_test

import (
	"fmt"
	"path/filepath"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestFlagshipViews checks what fusion across shape changes leaves of the data
// movement in the flagship's training step (llamagen's layout of flagship.py):
// no slice kernels (RoPE reads its halves in place), one split per layer (v
// out of the qkv projection, for attention; q and k and the w13 halves are read
// in place), one concat copy per layer in f32 (dv into the qkv gradient; RoPE's
// backward and SwiGLU's write their parts of the gradients in place) and none in
// bf16 (the flash backward writes dv there too), and no elementwise kernel for
// the residual adds (the norms beside them do them).
func TestFlagshipViews(t *testing.T) {
	c := drivertest.FlagshipSteps["fused"]
	f := drivertest.FlagshipStep(t, c)
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]int{}
		for _, s := range p.Plan.Steps {
			fams[s.Op]++
		}
		l := int(c.Layers)
		concats := l
		if st == tensor.BF16 {
			concats = 0
		}
		if fams["slice"] != 0 || fams["split"] != l || fams["concat"] != concats || fams["full"] > 1 {
			t.Errorf("%v: launches per family %v; want no slice, %d split, %d concat, at most one full", st, fams, l, concats)
		}
		// Per layer RoPE of q and k, SwiGLU, and their backward (the residual adds
		// run inside the norms), plus the RoPE table.
		if fams["elementwise"] != 6*l+1 {
			t.Errorf("%v: %d elementwise launches, want %d (%v)", st, fams["elementwise"], 6*l+1, fams)
		}
	}
}

// TestFlashViewsGPT2 checks that GPT-2's attention reads q, k and v where its
// fused c_attn projection wrote them and writes their gradients into the
// projection's gradient: in bf16 (the flash kernels) no split or concat copies;
// in f32 (the scalar kernels, which take their own buffers) one a tensor.
func TestFlashViewsGPT2(t *testing.T) {
	f := drivertest.CompiledStep(t, "../../testdata/hf/hf_gpt2.onnx", driver.Bindings{SeqLen: 64, Batch: 2})
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]int{}
		for _, s := range p.Plan.Steps {
			fams[s.Op]++
		}
		want := 6 // 2 layers × q, k, v
		if st == tensor.BF16 {
			want = 0
		}
		if fams["split"] != want || fams["concat"] != want {
			t.Errorf("%v: %d split and %d concat launches, want %d each", st, fams["split"], fams["concat"], want)
		}
		checkReadsWritten(t, "hf_gpt2/"+st.String(), p)
	}
}

// TestPlanReadsWritten checks, for every shared model's training step, the
// flagship-shaped steps and the zoo, in f32 and bf16, that every buffer a launch
// reads was written by an earlier launch or uploaded (a parameter or constant):
// a view, a placed operand, a recomputed value or a residual add that lost its
// producer would read memory no kernel wrote.
func TestPlanReadsWritten(t *testing.T) {
	graphs := map[string]*ir.Func{}
	for _, path := range models(t) {
		graphs[filepath.Base(path)] = drivertest.TrainingGraph(t, path)
	}
	graphs["zoo"], _ = cudatest.Zoo(t, 1)
	for name, c := range drivertest.FlagshipSteps {
		graphs["flagship_"+name] = drivertest.FlagshipStep(t, c)
	}
	for _, name := range sortedKeys(graphs) {
		for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
			p, err := codegen.Build(graphs[name], codegen.Options{Arch: "compute_80", Storage: st})
			if err != nil {
				t.Fatal(err)
			}
			checkReadsWritten(t, fmt.Sprintf("%s/%v", name, st), p)
		}
	}
}

func checkReadsWritten(t *testing.T, name string, p *codegen.Program) {
	t.Helper()
	pl := p.Plan
	owner := func(id int) int {
		if b := pl.Buffers[id]; b.Kind == "alias" {
			return b.AliasOf
		}
		return id
	}
	written := map[int]bool{}
	for _, b := range pl.Buffers {
		if b.Kind == "param" || b.Kind == "const" || b.Kind == "inline" {
			written[b.ID] = true
		}
	}
	params := map[string][]codegen.Param{}
	for _, k := range p.Kernels {
		params[k.Name] = k.Params
	}
	read := func(i int, s codegen.Step, id int) {
		if !written[owner(id)] {
			t.Errorf("%s: step %d (%s, node %d) reads buffer %d, which nothing wrote before", name, i, s.Op, s.Node, id)
		}
	}
	for i, s := range pl.Steps {
		switch s.Kind {
		case "kernel":
			ps := params[s.Kernel]
			for j, a := range s.Args {
				if !ps[j].Out {
					read(i, s, a)
				}
			}
			for j, a := range s.Args {
				if ps[j].Out {
					written[owner(a)] = true
				}
			}
		case "gemm":
			read(i, s, s.Args[0])
			read(i, s, s.Args[1])
			if s.Gemm.Beta != 0 {
				read(i, s, s.Args[2])
			}
			written[owner(s.Args[2])] = true
		}
	}
	for _, o := range pl.Outputs {
		if !written[owner(o.ID)] {
			t.Errorf("%s: output %s (buffer %d) is never written", name, o.Name, o.ID)
		}
	}
}
