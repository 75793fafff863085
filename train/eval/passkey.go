package eval

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
	"github.com/lcc-dev/lcc/train/plot"
)

// PasskeyOptions say which cells of the pass-key table to measure.
type PasskeyOptions struct {
	// Lengths are the context lengths (tokens per prompt); Depths the needle's
	// depths in percent of the filler (0: at the start, 100: just before the
	// question).
	Lengths []int
	Depths  []float64
	// Trials is the number of prompts per cell; Seed seeds their keys and
	// filler.
	Trials int
	Seed   uint64
}

// Passkey is the table of pass-key accuracies: Accuracy[d][l] at Depths[d]
// and Lengths[l], each the share of the key digits retrieved.
type Passkey struct {
	Lengths  []int
	Depths   []float64
	Accuracy [][]float64
	// Trials prompts per cell, of PasskeyDigits digits each.
	Trials int
	// RoPE is, per length, what --rope-theta and --rope-scaling rewrote (nil
	// entries without them): each length loads its own forward, and dynamic
	// scaling's frequencies depend on the length.
	RoPE []*passes.RoPEResult
}

// cellSeed is the seed of the prompts at length l and depth index d: a cell's
// prompts do not depend on the other cells asked for.
func cellSeed(seed uint64, l int, d float64) uint64 {
	return seed*0x9e3779b97f4a7c15 ^ uint64(l)<<16 ^ uint64(d*1000)
}

// ScorePasskey measures pass-key retrieval at every (length, depth).
func ScorePasskey(o Options, po PasskeyOptions) (*Passkey, error) {
	switch {
	case len(po.Lengths) == 0:
		return nil, fmt.Errorf("--lengths: none given")
	case len(po.Depths) == 0:
		return nil, fmt.Errorf("--depths: none given")
	case po.Trials < 1:
		return nil, fmt.Errorf("--trials %d: want >= 1", po.Trials)
	}
	for _, l := range po.Lengths {
		if l < data.PasskeyMinSeq {
			return nil, fmt.Errorf("--lengths %d: a pass-key prompt needs >= %d tokens", l, data.PasskeyMinSeq)
		}
	}
	for _, d := range po.Depths {
		if !(d >= 0 && d <= 100) {
			return nil, fmt.Errorf("--depths %v: want percentages 0..100", d)
		}
	}
	path, ws, err := o.weights()
	if err != nil {
		return nil, err
	}
	if path == "" {
		path = o.Model
	}
	res := &Passkey{Lengths: po.Lengths, Depths: po.Depths, Trials: po.Trials,
		Accuracy: make([][]float64, len(po.Depths)), RoPE: make([]*passes.RoPEResult, len(po.Lengths))}
	for d := range res.Accuracy {
		res.Accuracy[d] = make([]float64, len(po.Lengths))
	}
	for li, l := range po.Lengths {
		m, err := o.load(path, ws, l, data.PasskeyDigits)
		if err != nil {
			return nil, err
		}
		res.RoPE[li] = m.rope
		if m.vocab < 128 {
			return nil, fmt.Errorf("%s: pass-key prompts are ASCII: the vocabulary %d is under 128", path, m.vocab)
		}
		for di, d := range po.Depths {
			acc, err := o.passkeyCell(m, l, d/100, po.Trials, data.NewRNG(cellSeed(po.Seed, l, d)))
			if err != nil {
				o.release(m)
				return nil, fmt.Errorf("pass key at length %d, depth %v%%: %w", l, d, err)
			}
			res.Accuracy[di][li] = acc
		}
		o.release(m)
	}
	return res, nil
}

// passkeyCell is the teacher-forced digit accuracy of trials prompts of
// length t with the needle at depth (0..1).
func (o Options) passkeyCell(m *model, t int, depth float64, trials int, rng *data.RNG) (float64, error) {
	T, nd := int64(t), int64(data.PasskeyDigits)
	right, total := 0, 0
	for done := 0; done < trials; done += m.batch {
		ids, labels := tensor.New(tensor.I64, int64(m.batch), T), tensor.New(tensor.I64, int64(m.batch), T)
		take := min(m.batch, trials-done)
		for b := range int64(m.batch) {
			row := ids.I[b*T : (b+1)*T]
			if b < int64(take) {
				if err := data.Passkey(row, depth, rng); err != nil {
					return 0, err
				}
			} else {
				copy(row, ids.I[:T]) // spare rows, not counted
			}
			for p := range T {
				labels.I[b*T+p] = data.IgnoreIndex
			}
			for p := T - nd - 1; p < T-1; p++ {
				labels.I[b*T+p] = row[p+1]
			}
		}
		lg, err := o.forward(m, ids, labels)
		if err != nil {
			return 0, err
		}
		for b := range int64(take) {
			// Logits row i (position T−nd−1+i) predicts digit i (position T−nd+i).
			for i := range nd {
				at := (b*nd + i) * m.vocab
				if argmax(lg.F[at:at+m.vocab]) == ids.I[b*T+T-nd+i] {
					right++
				}
				total++
			}
		}
	}
	return float64(right) / float64(total), nil
}

// Table is the accuracies as text: one row per depth, one column per length.
func (p *Passkey) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pass-key retrieval accuracy (teacher-forced, %d digits x %d prompts per cell; chance 0.10)\n",
		data.PasskeyDigits, p.Trials)
	fmt.Fprintf(&b, "%-8s", "depth")
	for _, l := range p.Lengths {
		fmt.Fprintf(&b, " %8s", LengthLabel(l))
	}
	b.WriteString("\n")
	for d, depth := range p.Depths {
		fmt.Fprintf(&b, "%-8s", strconv.FormatFloat(depth, 'g', -1, 64)+"%")
		for l := range p.Lengths {
			fmt.Fprintf(&b, " %8.3f", p.Accuracy[d][l])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%-8s", "mean")
	for l := range p.Lengths {
		var s float64
		for d := range p.Depths {
			s += p.Accuracy[d][l] / float64(len(p.Depths))
		}
		fmt.Fprintf(&b, " %8.3f", s)
	}
	b.WriteString("\n")
	return b.String()
}

// Heatmap draws the table to path as the needle-in-a-haystack plots are drawn.
func (p *Passkey) Heatmap(path, title string) error {
	g := plot.Grid{XLabel: "context length (tokens)", YLabel: "needle depth (% of the context)",
		Scores: p.Accuracy}
	for _, l := range p.Lengths {
		g.Cols = append(g.Cols, LengthLabel(l))
	}
	for _, d := range p.Depths {
		g.Rows = append(g.Rows, strconv.FormatFloat(d, 'g', -1, 64)+"%")
	}
	if err := plot.Heatmap(path, title, g); err != nil {
		return fmt.Errorf("--heatmap %w", err)
	}
	return nil
}

// LengthLabel writes a length as the flags take it: 65536 as 64K.
func LengthLabel(l int) string {
	switch {
	case l >= 1<<20 && l%(1<<20) == 0:
		return strconv.Itoa(l>>20) + "M"
	case l >= 1<<10 && l%(1<<10) == 0:
		return strconv.Itoa(l>>10) + "K"
	}
	return strconv.Itoa(l)
}
