package eval

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
)

// PerplexityOptions say which windows to score.
type PerplexityOptions struct {
	// Data is tokens:FILE or bytes:FILE (TokenBytes wide for tokens:).
	Data       string
	TokenBytes int
	SeqLen     int
	// Windows is how many windows to score from the start of the file (0: all).
	Windows int
}

// Perplexity is the score of held-out windows.
type Perplexity struct {
	Windows, Tokens int
	// Losses is each window's mean cross-entropy; MeanLoss their mean and PPL
	// exp(MeanLoss).
	Losses        []float64
	MeanLoss, PPL float64
	// RoPE is what --rope-theta and --rope-scaling rewrote (nil without them).
	RoPE *passes.RoPEResult
}

// ScorePerplexity scores the first po.Windows windows of po.Data at po.SeqLen.
func ScorePerplexity(o Options, po PerplexityOptions) (*Perplexity, error) {
	path, ws, err := o.weights()
	if err != nil {
		return nil, err
	}
	if path == "" {
		path = o.Model
	}
	if po.SeqLen < 2 {
		return nil, fmt.Errorf("--seq-len %d: want >= 2 (the window length scored)", po.SeqLen)
	}
	if po.Windows < 0 {
		return nil, fmt.Errorf("--windows %d: want >= 0 (0: every window of the file)", po.Windows)
	}
	m, err := o.load(path, ws, po.SeqLen, 0)
	if err != nil {
		return nil, err
	}
	defer o.release(m)
	// One window per stream batch: a model batch of B takes B of them at a time.
	s, err := data.Open(po.Data, data.Options{SeqLen: po.SeqLen, Batch: 1, Vocab: m.vocab,
		TokenBytes: po.TokenBytes})
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	defer s.Close()
	total := int(s.Windows())
	if total == 0 {
		return nil, fmt.Errorf("--data %s: perplexity reads a file (tokens:FILE or bytes:FILE)", po.Data)
	}
	n := total
	if po.Windows > 0 {
		if po.Windows > total {
			return nil, fmt.Errorf("--windows %d: %s holds %d windows of %d tokens", po.Windows, po.Data, total,
				po.SeqLen)
		}
		n = po.Windows
	}
	res := &Perplexity{Windows: n, Tokens: n * po.SeqLen, RoPE: m.rope}
	t := int64(po.SeqLen)
	for done := 0; done < n; done += m.batch {
		ids, labels := tensor.New(tensor.I64, int64(m.batch), t), tensor.New(tensor.I64, int64(m.batch), t)
		take := min(m.batch, n-done)
		for b := range m.batch {
			if b < take {
				w, err := s.Next()
				if err != nil {
					return nil, err
				}
				copy(ids.I[int64(b)*t:], w.InputIDs.I)
				copy(labels.I[int64(b)*t:], w.Labels.I)
			} else {
				// The last batch's spare rows repeat its first and are not counted.
				copy(ids.I[int64(b)*t:(int64(b)+1)*t], ids.I[:t])
				copy(labels.I[int64(b)*t:(int64(b)+1)*t], labels.I[:t])
			}
		}
		lg, err := o.forward(m, ids, labels)
		if err != nil {
			return nil, err
		}
		v := m.vocab
		for b := range int64(take) {
			var sum float64
			for p := range t {
				row := (b*t + p) * v
				sum += crossEntropy(lg.F[row:row+v], labels.I[b*t+p])
			}
			res.Losses = append(res.Losses, sum/float64(t))
		}
	}
	for _, l := range res.Losses {
		res.MeanLoss += l / float64(n)
	}
	res.PPL = math.Exp(res.MeanLoss)
	return res, nil
}
