package train

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// trajectory is a PyTorch run of lcc's recipe (scripts/torch_trajectory.py): the
// model, the flags it ran with, and what every step saw.
type trajectory struct {
	Model       string    `json:"model"` // under testdata/
	Batch       int       `json:"batch"`
	SeqLen      int       `json:"seq_len"`
	Steps       int       `json:"steps"`
	LR          float64   `json:"lr"`
	MinLR       float64   `json:"min_lr"`
	Warmup      int       `json:"warmup"`
	WeightDecay float64   `json:"weight_decay"`
	Clip        float64   `json:"clip"`
	Data        string    `json:"data"` // tokens:FILE, FILE under testdata/
	Losses      []float64 `json:"losses"`
	GradNorms   []float64 `json:"grad_norms"`
}

// trajectoryModels are the models whose reference is another file's: the same
// weights under another opset or with external data.
var trajectoryModels = map[string]string{
	"llama_mini_op23":    "llama_mini",
	"llama_mini_extdata": "llama_mini",
	"gpt_neox_noopt":     "gpt_neox",
	"gemma_noopt":        "gemma",
}

// refused are the trajectories whose optimised export lcc train refuses, with a
// parameter the refusal must name; their optimize=False exports train instead.
// Gemma's norms scale by 1 + w, which the exporter folds into one constant for all
// five norms (w is gone).
var refused = map[string]string{"gemma": "m.model.norm.weight"}

// TestTrajectoryMatchesPyTorch trains every model of testdata/trajectory for 30
// steps on the CPU and holds each step's loss within 1e-5 of PyTorch's (relative),
// and its gradient norm too: a parameter trained twice (a tied weight split in
// two) or one the exporter merged with another shows in both long before 30 steps.
func TestTrajectoryMatchesPyTorch(t *testing.T) {
	files, err := filepath.Glob("../testdata/trajectory/*.json")
	if err != nil || len(files) < 12 {
		t.Fatalf("trajectories: %v, %v", files, err)
	}
	runs := map[string]string{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if name == "progressive" {
			continue // two lengths in one run: TestProgressiveResume holds lcc to it
		}
		runs[name] = f
	}
	for model, ref := range trajectoryModels {
		runs[model] = runs[ref]
	}
	for _, name := range slices.Sorted(maps.Keys(runs)) {
		file := runs[name]
		if refused[name] != "" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var tr trajectory
			js, err := os.ReadFile(file)
			if err == nil {
				err = json.Unmarshal(js, &tr)
			}
			if err != nil {
				t.Fatal(err)
			}
			model := tr.Model
			if other, ok := trajectoryModels[name]; ok {
				model = strings.Replace(model, other, name, 1)
			}
			c := DefaultConfig()
			c.Model = filepath.Join("../testdata", model)
			c.Data = "tokens:" + filepath.Join("../testdata", strings.TrimPrefix(tr.Data, "tokens:"))
			c.SeqLen, c.Batch, c.Steps, c.LR, c.MinLR = tr.SeqLen, tr.Batch, tr.Steps, tr.LR, tr.MinLR
			c.Warmup, c.WeightDecay, c.Clip = tr.Warmup, tr.WeightDecay, tr.Clip
			c.Metrics = filepath.Join(t.TempDir(), "metrics.jsonl")
			c.Version = "test"
			res := run(t, c)
			got := readMetrics(t, c.Metrics)
			if len(res.Losses) != tr.Steps || len(got) != tr.Steps {
				t.Fatalf("%d losses, %d metric lines; want %d", len(res.Losses), len(got), tr.Steps)
			}
			var worstLoss, worstNorm float64
			for s := range tr.Steps {
				worstLoss = max(worstLoss, math.Abs(res.Losses[s]-tr.Losses[s])/math.Abs(tr.Losses[s]))
				worstNorm = max(worstNorm, math.Abs(got[s].GradNorm-tr.GradNorms[s])/tr.GradNorms[s])
			}
			// Gradient norms are sums of many squares, so they carry more rounding than
			// the loss does; a parameter trained twice is off by far more (1e-4 at step 1).
			if !(worstLoss <= 1e-5) || !(worstNorm <= 2e-5) {
				t.Errorf("against PyTorch over %d steps: loss rel err %.3g (want <= 1e-5), grad norm %.3g "+
					"(want <= 2e-5); first losses lcc %v, PyTorch %v", tr.Steps, worstLoss, worstNorm,
					res.Losses[:3], tr.Losses[:3])
			}
		})
	}
}

// TestTrainRefusesFoldedParameters: lcc train refuses an export whose parameters
// it cannot give back, naming them and the export that keeps them apart.
func TestTrainRefusesFoldedParameters(t *testing.T) {
	for name, param := range refused {
		c := DefaultConfig()
		c.Model, c.Data = "../testdata/trajectory/"+name+".onnx", "tokens:../testdata/trajectory/tokens.bin"
		c.SeqLen, c.Steps = 16, 1
		_, err := Train(c)
		if err == nil || !strings.Contains(err.Error(), param) || !strings.Contains(err.Error(), "optimize=False") {
			t.Errorf("%s: %v, want a refusal naming %s and optimize=False", name, err, param)
		}
	}
}
