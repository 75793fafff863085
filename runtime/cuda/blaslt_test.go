package cuda

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

func TestGemmParamsDefaults(t *testing.T) {
	p := GemmParams{TransA: true, M: 3, N: 5, K: 7, A: 256, B: 512, C: 1024 + 4,
		Type: tensor.BF16, Alpha: 1}
	k, err := p.key()
	if err != nil {
		t.Fatal(err)
	}
	// A is stored K×M when transposed, so its packed row length is M.
	if p.LDA != 3 || p.LDB != 5 || p.LDC != 5 || p.Batch != 1 || p.CType != tensor.BF16 {
		t.Errorf("defaults: %+v", p)
	}
	if k.alignA != 256 || k.alignC != 4 {
		t.Errorf("alignments A %d C %d, want 256 and 4", k.alignA, k.alignC)
	}
}

func TestGemmParamsErrors(t *testing.T) {
	ok := GemmParams{M: 4, N: 4, K: 4, A: 256, B: 256, C: 256, Type: tensor.F32, Alpha: 1}
	for _, tc := range []struct {
		edit func(*GemmParams)
		want string
	}{
		{func(p *GemmParams) { p.K = 0 }, "must be positive"},
		{func(p *GemmParams) { p.Type = tensor.I32 }, "element type i32"},
		{func(p *GemmParams) { p.CType = tensor.BF16 }, "C type bf16"},
		{func(p *GemmParams) { p.Alpha = 0 }, "both 0"},
		{func(p *GemmParams) { p.LDA = 2 }, "LDA = 2"},
		{func(p *GemmParams) { p.Batch, p.StrideC = 2, 8 }, "overlap"},
		{func(p *GemmParams) { p.C = 0 }, "nil matrix"},
	} {
		p := ok
		tc.edit(&p)
		if _, err := p.key(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", p, err, tc.want)
		}
	}
	p := ok
	if _, err := p.key(); err != nil {
		t.Errorf("valid params refused: %v", err)
	}
}
