package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
)

// ropeVariants are scripts/rope_refs.py's variants and the flags that ask lcc for
// the same RoPE: Hugging Face built each model with that configuration, lcc
// rewrites the base export.
var ropeVariants = []struct{ name, flags string }{
	{"theta", "--rope-theta=1e6"},
	{"linear", "--rope-scaling=linear:4"},
	{"ntk", "--rope-scaling=ntk:4"},
	{"dynamic", "--rope-scaling=dynamic:2,orig=16"},
	{"yarn", "--rope-scaling=yarn:4,orig=16"},
	{"llama3", "--rope-scaling=llama3:8,low=1,high=4,orig=16"},
}

// The base export of a Llama and a Qwen2, rewritten by --rope-theta or
// --rope-scaling, gives Hugging Face's logits and gradients for the model built
// with that RoPE (‖lcc − HF‖/‖HF‖ ≤ 1e-5 per tensor), with HF's own inv_freq and
// attention factor.
func TestRoPEMatchesHuggingFace(t *testing.T) {
	dir := filepath.Join(td, "rope")
	for _, model := range []string{"llama", "qwen2"} {
		onnxPath := filepath.Join(dir, "rope_"+model+".onnx")
		for _, v := range ropeVariants {
			ref := filepath.Join(dir, "rope_"+model+"_"+v.name+".ref.safetensors")
			for _, p := range []string{onnxPath, ref} {
				if _, err := os.Stat(p); err != nil {
					t.Skipf("%s is missing: run `python3 scripts/rope_refs.py --out DIR` on the device and "+
						"copy DIR's files to testdata/rope/", p)
				}
			}
			t.Run(model+"_"+v.name, func(t *testing.T) {
				checkRoPEFrequencies(t, onnxPath, ref, v.flags)
				stdout, stderr, code := lcc(t, "check", onnxPath, "--ref", ref, "--grads", "--tolerance=1e-5", v.flags)
				if code != 0 {
					t.Fatalf("lcc check %s: exit %d\n%s%s", v.flags, code, stdout, stderr)
				}
				if !strings.Contains(stderr, "lcc: rope: ") {
					t.Errorf("lcc check %s does not say what it rewrote:\n%s", v.flags, stderr)
				}
			})
		}
	}
}

// checkRoPEFrequencies compares the frequencies rescale-rope writes into the
// base export with those the reference's metadata says Hugging Face used.
func checkRoPEFrequencies(t *testing.T, model, ref, flags string) {
	t.Helper()
	rf, shapes, err := driver.ReadRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := rf.Metadata["lcc_flags"]; got != flags {
		t.Fatalf("%s was made for %q, the test asks for %q", ref, got, flags)
	}
	var want []float64
	if err := json.Unmarshal([]byte(rf.Metadata["inv_freq"]), &want); err != nil {
		t.Fatalf("%s: metadata inv_freq: %v", ref, err)
	}
	attn, err := strconv.ParseFloat(rf.Metadata["attention_factor"], 64)
	if err != nil {
		t.Fatalf("%s: metadata attention_factor: %v", ref, err)
	}
	var rope ropeFlags
	k, val, _ := strings.Cut(strings.TrimPrefix(flags, "--"), "=")
	if k == "rope-theta" {
		rope.theta, _ = strconv.ParseFloat(val, 64)
	} else {
		rope.scaling = val
	}
	cfg, err := rope.config()
	if err != nil {
		t.Fatal(err)
	}
	f, err := driver.Load(model, driver.Bindings{InputShapes: shapes, InputValues: rf.Tensors, InputsFrom: ref})
	if err != nil {
		t.Fatal(err)
	}
	res, err := driver.ApplyRoPE(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.InvFreq) != len(want) {
		t.Fatalf("%s: %d frequencies, Hugging Face %d", flags, len(res.InvFreq), len(want))
	}
	for i := range want {
		if math.Abs(res.InvFreq[i]-want[i]) > 1e-6*want[i] {
			t.Errorf("%s: inv_freq[%d] = %g, Hugging Face %g", flags, i, res.InvFreq[i], want[i])
		}
	}
	if math.Abs(res.AttentionFactor-attn) > 1e-6 {
		t.Errorf("%s: attention factor %g, Hugging Face %g", flags, res.AttentionFactor, attn)
	}
}

// The flags reach compile's report (text and JSON) and pipeline, a model
// without RoPE and bad values are refused naming the flag, and a compiled step
// keeps its RoPE: lcc compile of DIR/graph.lcc takes the recorded flags and
// refuses others.
func TestRoPEFlags(t *testing.T) {
	hf := filepath.Join(td, "hf", "hf_llama_gqa_eager.onnx")
	rep := compileJSON(t, hf, "--seq-len=16", "--target=cpu", "--rope-scaling=yarn:4,orig=8", "--rope-theta=5e5")
	rope, _ := rep["rope"].(map[string]any)
	if rope == nil || rope["found_base"] != 10000.0 || rope["theta"] != 5e5 || rope["form"] != "tables" ||
		rope["scaling"] != "yarn:4,orig=8" || math.Abs(rope["attention_factor"].(float64)-(0.1*math.Log(4)+1)) > 1e-12 {
		t.Errorf("report.json rope: %v", rep["rope"])
	}
	if inv, _ := rope["inv_freq"].([]any); len(inv) != 8 {
		t.Errorf("report.json rope.inv_freq: %v", rope["inv_freq"])
	}
	if pl, _ := rep["pipeline"].([]any); len(pl) == 0 || pl[0] != "rescale-rope theta=500000 scaling=yarn:4,orig=8" {
		t.Errorf("pipeline: %v", rep["pipeline"])
	}
	// lcc train runs the program compile reports, saying what RoPE it trains with.
	out, stderr, code := lcc(t, "train", hf, "--device=cpu", "--target=cpu", "--data=synthetic:copy", "--seq-len=16",
		"--steps=1", "--lr=1e-3", "--seed=1", "--rope-scaling=yarn:4,orig=8", "--rope-theta=5e5")
	if code != 0 || !strings.Contains(out+stderr, "program "+rep["program_hash"].(string)) ||
		!strings.Contains(out+stderr, "rope    base 10000 → 500000, scaling yarn:4,orig=8") {
		t.Errorf("train: exit %d, want compile's program %v and a rope line:\n%s%s", code, rep["program_hash"], out, stderr)
	}
	plain := compileJSON(t, hf, "--seq-len=16", "--target=cpu")
	if plain["program_hash"] == rep["program_hash"] || plain["rope"] != nil {
		t.Errorf("the program hash does not see the RoPE flags (%v), or a rope entry without them", plain["program_hash"])
	}
	dir := t.TempDir()
	out, stderr, code = lcc(t, "compile", hf, "--seq-len=16", "--target=cpu", "--rope-theta=1e6", "-o", dir+"/step")
	if code != 0 || !strings.Contains(out, "rope       base 10000 → 1e+06, scaling none; rotary dim 16, "+
		"1 cos/sin table pair(s) rewritten\n           inv_freq[8] 1, 0.177828, 0.0316228, …") {
		t.Fatalf("compile: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code = lcc(t, "compile", dir+"/step/graph.lcc", "--target=cpu"); code != 0 {
		t.Errorf("compile of the step without flags: exit %d\n%s", code, stderr)
	}
	_, stderr, code = lcc(t, "compile", dir+"/step/graph.lcc", "--target=cpu", "--rope-theta=5e5")
	if code != 1 || !strings.Contains(stderr, "--rope-theta=500000: ") || !strings.Contains(stderr, "records --rope-theta=1e+06") {
		t.Errorf("compile of the step with another theta: exit %d\n%s", code, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=16", "--rope-theta=1e6"},
			"pass rescale-rope: --rope-theta=1e+06: found no rotary position embedding: looked for"},
		{[]string{"compile", hf, "--rope-scaling=cubic:2"}, `--rope-scaling "cubic:2": no kind "cubic"`},
		{[]string{"compile", hf, "--rope-theta=-3"}, "--rope-theta -3: want a base above 1"},
		{[]string{"run", hf, "--inputs=x", "--rope-scaling=linear:0"}, "the factor F must be a number >= 1"},
		{[]string{"check", hf, "--ref=x", "--rope-scaling=yarn:2,low=1"}, `yarn takes no "low"`},
		{[]string{"train", hf, "--rope-scaling=llama3:8,low=4,high=1"}, "high=1 must exceed low=4"},
	} {
		_, stderr, code := lcc(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("lcc %v: exit %d, want 1 and %q:\n%s", c.args, code, c.want, stderr)
		}
	}
}
