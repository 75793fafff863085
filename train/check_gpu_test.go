package train

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// TestGPUCheckBF16Flash is issue #28's acceptance point as `lcc check
// --device=cuda --precision=bf16 --grads` runs it: the models whose attention
// runs on the tensor-core kernels (head dim 64: trajectory/qwen2_d64, with the
// peaked softmax of init std 0.2 and q/k/v biases; head dim 128) pass under
// 2e-2 against the CPU emulating the program the session ran, those kernels'
// roundings included (driver.CheckOptions.Program).
func TestGPUCheckBF16Flash(t *testing.T) {
	dev := devicetest.Open(t)
	for _, model := range []string{"../testdata/trajectory/qwen2_d64", "../testdata/hf/hf_llama_gqa_d128_sdpa"} {
		t.Run(model[strings.LastIndex(model, "/")+1:], func(t *testing.T) {
			rf, shapes, err := driver.ReadRef(model + ".ref.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			f, err := driver.Load(model+".onnx", driver.Bindings{InputShapes: shapes, InputValues: rf.Tensors})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := driver.Prepare(f, driver.AttentionOptions{}, passes.Options{}); err != nil {
				t.Fatal(err)
			}
			s := exec.NewSession(dev, exec.Options{Storage: tensor.BF16})
			defer s.Close()
			var out bytes.Buffer
			res, err := driver.CheckGrads(f, rf, model, driver.CheckOptions{Tolerance: 2e-2, Out: &out,
				Run: s.Run, Storage: tensor.BF16, Program: s.ProgramOf})
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.Contains(res.Emulated, "tensor-core kernels") {
				t.Errorf("attention did not run on the tensor-core kernels (emulated: %q)\n%s", res.Emulated,
					out.String())
			}
			t.Logf("max_rel_err=%.3e (%s)", res.MaxRelErr, res.Emulated)
		})
	}
}
