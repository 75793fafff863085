package eval

import (
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
)

const (
	llamaMini = "../../testdata/onnx/llama_mini.onnx"
	tokensBin = "../../testdata/trajectory/tokens.bin"
)

// TestPerplexityIsCheckLoss scores 6 windows of tokens.bin with llama_mini, 4
// at a time (the last batch padded), and checks the perplexity against exp of
// lcc check's loss (driver.CheckGrads: the cross-entropy objective lcc check
// --grads adds) of the same 6 windows in one batch.
func TestPerplexityIsCheckLoss(t *testing.T) {
	const T, n = 16, 6
	r, err := ScorePerplexity(Options{Model: llamaMini, Batch: 4}, PerplexityOptions{Data: "tokens:" + tokensBin,
		SeqLen: T, Windows: n})
	if err != nil {
		t.Fatal(err)
	}
	if r.Windows != n || r.Tokens != n*T || len(r.Losses) != n || math.Abs(r.PPL-math.Exp(r.MeanLoss)) > 1e-12 {
		t.Fatalf("perplexity %+v", r)
	}
	// The same windows as lcc train reads them, in one reference file.
	s, err := data.Open("tokens:"+tokensBin, data.Options{SeqLen: T, Batch: n, Vocab: 512})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Next()
	s.Close()
	f, err := driver.Load(llamaMini, driver.Bindings{SeqLen: T, Batch: n})
	if err != nil {
		t.Fatal(err)
	}
	var input string
	for _, p := range f.Params {
		if p.Role == ir.RoleInput {
			input = p.Name
		}
	}
	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	ts := map[string]*tensor.Tensor{input: b.InputIDs, "labels": b.Labels}
	if err := safetensors.Write(ref, []string{input, "labels"}, ts, nil); err != nil {
		t.Fatal(err)
	}
	rf, _, err := driver.ReadRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := driver.Prepare(f, driver.AttentionOptions{}, passes.Options{}); err != nil {
		t.Fatal(err)
	}
	res, err := driver.CheckGrads(f, rf, ref, driver.CheckOptions{Tolerance: 1e-4, Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	var checkLoss float64
	found := false
	for name, v := range res.Outputs {
		if v.DType.IsFloat() && len(v.F) == 1 && !strings.HasPrefix(name, "grad.") {
			checkLoss, found = v.F[0], true
		}
	}
	if !found {
		t.Fatalf("lcc check's outputs hold no loss: %d outputs", len(res.Outputs))
	}
	t.Logf("perplexity %.9g; lcc check's loss %.9g, exp %.9g", r.PPL, checkLoss, math.Exp(checkLoss))
	if rel := math.Abs(r.PPL-math.Exp(checkLoss)) / math.Exp(checkLoss); !(rel < 1e-6) {
		t.Errorf("perplexity %.9g, exp(lcc check's loss %.9g) = %.9g: rel err %.3g", r.PPL, checkLoss,
			math.Exp(checkLoss), rel)
	}
}

// TestRoPEPerLength: Options.RoPE rewrites every length's forward for that
// length: dynamic scaling gives the 128-token forward a larger base than the
// 64-token one, each reported in Passkey.RoPE; perplexity reports its own.
func TestRoPEPerLength(t *testing.T) {
	s, err := passes.ParseRoPEScaling("dynamic:2,orig=32")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Model: llamaMini, RoPE: passes.RoPEConfig{Scaling: s}}
	pk, err := ScorePasskey(o, PasskeyOptions{Lengths: []int{64, 128}, Depths: []float64{50}, Trials: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(pk.RoPE) != 2 || pk.RoPE[0] == nil || pk.RoPE[1] == nil || pk.RoPE[0].Tokens != 64 ||
		pk.RoPE[1].Tokens != 128 || !(pk.RoPE[1].Base > pk.RoPE[0].Base && pk.RoPE[0].Base > 10000) {
		t.Fatalf("pass-key RoPE per length: %+v", pk.RoPE)
	}
	r, err := ScorePerplexity(o, PerplexityOptions{Data: "tokens:" + tokensBin, SeqLen: 64, Windows: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.RoPE == nil || r.RoPE.Base != pk.RoPE[0].Base {
		t.Errorf("perplexity at 64 tokens: RoPE %+v, want the pass key's at 64 (base %g)", r.RoPE, pk.RoPE[0].Base)
	}
	plain, err := ScorePerplexity(Options{Model: llamaMini}, PerplexityOptions{Data: "tokens:" + tokensBin,
		SeqLen: 64, Windows: 1})
	if err != nil {
		t.Fatal(err)
	}
	if plain.RoPE != nil || plain.MeanLoss == r.MeanLoss {
		t.Errorf("without RoPE: %+v, mean loss %g (with it %g)", plain.RoPE, plain.MeanLoss, r.MeanLoss)
	}
}

// TestEvalErrors: bad flags and files are errors naming them.
func TestEvalErrors(t *testing.T) {
	o := Options{Model: llamaMini}
	for _, tc := range []struct {
		po   PerplexityOptions
		want string
	}{
		{PerplexityOptions{Data: "tokens:" + tokensBin, SeqLen: 16, Windows: 1000}, "--windows 1000"},
		{PerplexityOptions{Data: "synthetic:copy", SeqLen: 16}, "reads a file"},
		{PerplexityOptions{Data: "tokens:/nonexistent", SeqLen: 16}, "/nonexistent"},
		{PerplexityOptions{Data: "tokens:" + tokensBin, SeqLen: 1}, "--seq-len 1"},
	} {
		if _, err := ScorePerplexity(o, tc.po); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.po, err, tc.want)
		}
	}
	for _, tc := range []struct {
		po   PasskeyOptions
		want string
	}{
		{PasskeyOptions{Lengths: []int{32}, Depths: []float64{0}, Trials: 1}, "--lengths 32"},
		{PasskeyOptions{Lengths: []int{64}, Depths: []float64{101}, Trials: 1}, "--depths 101"},
		{PasskeyOptions{Lengths: []int{64}, Depths: []float64{0}}, "--trials 0"},
	} {
		if _, err := ScorePasskey(o, tc.po); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.po, err, tc.want)
		}
	}
	if _, err := ScorePasskey(Options{Model: t.TempDir()}, PasskeyOptions{Lengths: []int{64},
		Depths: []float64{0}, Trials: 1}); err == nil || !strings.Contains(err.Error(), "without checkpoints") {
		t.Errorf("an empty folder: %v", err)
	}
}

// TestPasskeyTail: the pass-key forward keeps the logits rows that predict
// the key's digits, and they equal those rows of the whole forward.
func TestPasskeyTail(t *testing.T) {
	const T, nd = 64, data.PasskeyDigits
	o := Options{Model: llamaMini}
	full, err := o.load(llamaMini, nil, T, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := o.load(llamaMini, nil, T, nd)
	if err != nil {
		t.Fatal(err)
	}
	ids, labels := tensor.New(tensor.I64, 1, T), tensor.New(tensor.I64, 1, T)
	if err := data.Passkey(ids.I, 0.5, data.NewRNG(3)); err != nil {
		t.Fatal(err)
	}
	a, err := o.forward(full, ids, labels)
	if err != nil {
		t.Fatal(err)
	}
	b, err := o.forward(tail, ids, labels)
	if err != nil {
		t.Fatal(err)
	}
	v := int(full.vocab)
	if len(b.F) != nd*v {
		t.Fatalf("tail logits: %d values, want %d", len(b.F), nd*v)
	}
	for i := range nd * v {
		if got, want := b.F[i], a.F[(T-nd-1)*v+i]; got != want {
			t.Fatalf("tail logit %d: %v, the whole forward's %v", i, got, want)
		}
	}
}
