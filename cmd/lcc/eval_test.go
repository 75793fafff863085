package main

import (
	"bytes"
	"encoding/json"
	stdpng "image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestEvalRoPE: --rope-theta changes what eval scores, and to what training
// with it scores. On llama_mini (untrained) and the first window of 64 tokens,
// theta 100 moves the mean loss by about 5e-3; lcc train with the same theta
// reports, for its first step, the loss of the same window under the same
// weights, which eval must give to 1e-5 (it sums in float64, train's fused
// cross-entropy in f32). The rope lines say which frequencies were used, as
// train's do, and a checkpoint of that run scores differently without the flag
// (it does not record the RoPE).
func TestEvalRoPE(t *testing.T) {
	const model, toks = "../../testdata/onnx/llama_mini.onnx", "tokens:../../testdata/trajectory/tokens.bin"
	dir := t.TempDir()
	loss := regexp.MustCompile(`mean loss ([0-9.]+) `)
	evalLoss := func(m string, flags ...string) (float64, string) {
		t.Helper()
		out, stderr, code := lcc(t, append([]string{"eval", m, "--data=" + toks, "--seq-len=64", "--windows=1"},
			flags...)...)
		mm := loss.FindStringSubmatch(out)
		if code != 0 || mm == nil {
			t.Fatalf("eval %s %v: exit %d\n%s%s", m, flags, code, out, stderr)
		}
		l, _ := strconv.ParseFloat(mm[1], 64)
		return l, out
	}
	plain, plainOut := evalLoss(model)
	theta, out := evalLoss(model, "--rope-theta=100")
	const rope = "rope    base 10000 → 100, scaling none; rotary dim 16, 1 cos/sin table pair(s) rewritten\n" +
		"rope    inv_freq[8] 1, 0.562341, 0.316228, …"
	if !strings.Contains(out, rope) || strings.Contains(plainOut, "rope ") {
		t.Errorf("want rope lines with the flag alone:\n%s\nwithout it:\n%s", out, plainOut)
	}
	if !(math.Abs(theta-plain) > 1e-3) {
		t.Errorf("--rope-theta=100: mean loss %.6f, without it %.6f: the flag is not applied", theta, plain)
	}
	metrics, ck := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "ck")
	if _, stderr, code := lcc(t, "train", model, "--device=cpu", "--target=cpu", "--data="+toks, "--seq-len=64",
		"--batch=1", "--steps=1", "--lr=1e-3", "--rope-theta=100", "--metrics="+metrics, "--checkpoint-dir="+ck,
		"--progress-every=0"); code != 0 {
		t.Fatalf("train: exit %d\n%s", code, stderr)
	}
	js, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	var step struct{ Loss float64 }
	if err := json.Unmarshal(js, &step); err != nil {
		t.Fatalf("%s: %v", metrics, err)
	}
	if math.Abs(step.Loss-theta) > 1e-5 {
		t.Errorf("train --rope-theta=100: step 1's loss %.7f; eval --rope-theta=100 of its model: %.6f",
			step.Loss, theta)
	}
	trained, _ := evalLoss(ck, "--rope-theta=100")
	again, _ := evalLoss(ck)
	if !(math.Abs(trained-again) > 1e-3) {
		t.Errorf("the checkpoint with --rope-theta=100: mean loss %.6f, without it %.6f", trained, again)
	}
}

// TestEvalPasskeyAfterTraining trains llama_mini on synthetic:passkey on the
// CPU (58 tokens, the shortest prompt; 400 steps of 2 at a constant lr 3e-3,
// about 20 s: the loss falls below ln 10 = 2.30, a guess among the digits, to
// about 2.0), then evaluates its checkpoint folder at the trained length: the
// mean digit accuracy over 600 digits (0.25 with these flags) must pass chance
// (0.1) by more than three standard deviations (0.012 each), and the heat map
// must be written. Larger batches, fewer steps or lr 1e-2 stay at chance.
func TestEvalPasskeyAfterTraining(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for about 20 s")
	}
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if _, stderr, code := lcc(t, "train", "../../testdata/onnx/llama_mini.onnx", "--data=synthetic:passkey",
		"--seq-len=58", "--batch=2", "--steps=400", "--lr=3e-3", "--min-lr=3e-3", "--warmup=20", "--progress-every=0",
		"--checkpoint-dir="+ck); code != 0 {
		t.Fatalf("train: exit %d\n%s", code, stderr)
	}
	png := filepath.Join(dir, "passkey.png")
	out, stderr, code := lcc(t, "eval", ck, "--passkey", "--lengths=58", "--depths=0,50,100", "--trials=40",
		"--heatmap="+png)
	if code != 0 {
		t.Fatalf("eval: exit %d\n%s", code, stderr)
	}
	m := regexp.MustCompile(`(?m)^mean\s+([0-9.]+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no mean accuracy in:\n%s", out)
	}
	acc, _ := strconv.ParseFloat(m[1], 64)
	t.Logf("pass-key accuracy at the trained length: %.3f\n%s", acc, out)
	if !(acc > 0.1+3*0.0123) || !strings.Contains(out, "heatmap: "+png) ||
		!strings.Contains(stderr, "ckpt-00000400.json (step 400)") {
		t.Errorf("mean accuracy %.3f (want > %.3f), heat map or checkpoint not reported:\n%s%s", acc,
			0.1+3*0.0123, out, stderr)
	}
	data, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if img, err := stdpng.Decode(bytes.NewReader(data)); err != nil || img.Bounds().Dx() < 500 {
		t.Errorf("%s: %v (want a PNG at least 500 pixels wide)", png, err)
	}
}

// TestEvalPerplexityAndErrors prints perplexity and refuses bad flags with
// exit status 1 and a message naming the flag.
func TestEvalPerplexityAndErrors(t *testing.T) {
	const model, toks = "../../testdata/onnx/llama_mini.onnx", "tokens:../../testdata/trajectory/tokens.bin"
	out, stderr, code := lcc(t, "eval", model, "--data="+toks, "--seq-len=16", "--windows=4", "--batch=2")
	if code != 0 || !regexp.MustCompile(`^perplexity [0-9.]+  mean loss [0-9.]+  over 4 windows of 16 tokens `+
		`\(64 tokens\)`).MatchString(out) {
		t.Errorf("perplexity: exit %d\n%s%s", code, out, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--passkey", "--data=" + toks}, "one of them"},
		{[]string{"--passkey"}, "--lengths: required"},
		{[]string{"--passkey", "--lengths=64,x"}, `--lengths "64,x"`},
		{[]string{"--passkey", "--lengths=64", "--depths=120"}, `--depths "120"`},
		{[]string{"--data=" + toks, "--seq-len=16", "--heatmap=a.png"}, "--heatmap draws the pass-key table"},
		{[]string{"--passkey", "--lengths=64", "--heatmap=a.txt"}, "--heatmap a.txt"},
		{[]string{"--data=" + toks, "--seq-len=16", "--lengths=64"}, "--lengths and --depths are for --passkey"},
		{[]string{"--data=" + toks, "--seq-len=16", "--device=tpu"}, `--device "tpu"`},
		{[]string{"--data=" + toks, "--seq-len=16", "--rope-scaling=cubic:2"}, `--rope-scaling "cubic:2": no kind`},
		{[]string{"--passkey", "--lengths=64", "--rope-scaling=linear:0"}, `--rope-scaling "linear:0": the factor`},
		{[]string{"--data=" + toks, "--seq-len=16", "--rope-theta=-3"}, "--rope-theta -3: want a base above 1"},
	} {
		_, stderr, code := lcc(t, append([]string{"eval", model}, tc.args...)...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("eval %v: exit %d, %q; want 1 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
