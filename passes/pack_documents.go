package passes

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// DocStartsInput is the input of a packed-documents step: i64 [B,T], for each token
// the position of the first token of its document (docs/design.md §3, "Packed
// documents"). The data loader makes it beside input_ids (train/data).
const DocStartsInput = "doc_starts"

// PackDocuments returns the pass that trains on packed documents: it adds the
// doc_starts input, gives every attention op a document mask (causal and same
// document), and restarts the model's positions at each document
// (RewriteRoPEPositions). It runs after the attention rewrites that make dense or
// dilated attention ops and before sequence sharding, which carries the doc starts
// to every rank.
func PackDocuments() Pass {
	return Pass{Name: "pack-documents",
		Doc: "mask attention to each packed document and restart positions there (--doc-sep)",
		Run: packDocuments}
}

func init() { Register(PackDocuments()) }

func packDocuments(f *ir.Func) error {
	if f.Param(DocStartsInput) != nil {
		return fmt.Errorf("pack-documents: the model already has an input %q", DocStartsInput)
	}
	var attn []*ir.Node
	for _, n := range f.Body {
		switch n.Op {
		case ir.OpAttention, ir.OpDilatedAttention:
			attn = append(attn, n)
		case ir.OpRingAttention, ir.OpShardedDilatedAttention, ir.OpAttentionGrad, ir.OpDilatedAttentionGrad:
			return fmt.Errorf("pack-documents: %s: runs before sequence sharding and autodiff", n.Where())
		}
	}
	if len(attn) == 0 {
		return fmt.Errorf("pack-documents: the model has no attention op to mask " +
			"(packed documents need its attention matched; see --require-attention)")
	}
	q := attn[0].Args[0].Type
	bs, ts := q.Shape[0], q.Shape[1]
	st := ir.T(tensor.I64, bs, ts)
	st.Labels = []string{"batch", "seq"}
	starts := f.AddParam(DocStartsInput, ir.RoleInput, st, nil)
	for _, n := range attn {
		q, k := n.Args[0].Type, n.Args[1].Type
		switch {
		case q.Shape[0] != bs || q.Shape[1] != ts || k.Shape[1] != ts:
			return fmt.Errorf("pack-documents: %s: q %v and k %v are not self-attention over [%d,%d]",
				n.Where(), q, k, bs, ts)
		case !n.AttrBool("causal"):
			return fmt.Errorf("pack-documents: %s: document masks need causal attention", n.Where())
		case n.Op == ir.OpAttention && len(n.Args) == 4:
			return fmt.Errorf("pack-documents: %s: has an explicit mask, which a document mask "+
				"does not combine with", n.Where())
		}
		n.Args = append(n.Args, starts)
		n.Attrs = n.Attrs.With("docs", true)
	}
	return RewriteRoPEPositions(f, starts)
}
