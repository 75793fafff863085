package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/perf"
	"github.com/lcc-dev/lcc/tensor"
)

// memShape is the shape and precision of the memory-bound workloads (ce, embed).
// t tokens, d hidden size, v vocabulary; precision is the storage dtype's flag value.
type memShape struct {
	t, d, v   int64
	precision string
}

// add registers the shape flags of a memory-bound benchmark, with T tokens by
// default.
func (m *memShape) add(cmd *cobra.Command, t int64) {
	f := cmd.Flags()
	f.Int64Var(&m.t, "T", t, "tokens")
	// One flag set for ce and embed, with the names attention.py takes, so one shape
	// passes unchanged to the anchor.
	f.Int64Var(&m.d, "d", 1024, "hidden size")
	f.Int64Var(&m.v, "V", 32768, "vocabulary size")
	// bf16 by default: half the bytes moved, and these workloads are bound by bytes.
	f.StringVar(&m.precision, "precision", "bf16", "storage precision: bf16 or fp32")
}

// check validates the flags and returns the storage dtype.
func (m *memShape) check() (tensor.DType, error) {
	// Checked before the GPU is opened: a typo should not cost a device session.
	if m.t < 1 || m.d < 1 || m.v < 1 {
		return 0, fmt.Errorf("--T %d --d %d --V %d: want positive sizes", m.t, m.d, m.v)
	}
	switch m.precision {
	case "bf16":
		return tensor.BF16, nil
	case "fp32":
		return tensor.F32, nil
	}
	return 0, fmt.Errorf("--precision %q: want bf16 or fp32", m.precision)
}

// anchorArgs are attention.py's arguments for workload what at m's shape.
func (m *memShape) anchorArgs(what string) []string {
	return []string{what, "--T", strconv.FormatInt(m.t, 10), "--d", strconv.FormatInt(m.d, 10),
		"--V", strconv.FormatInt(m.v, 10)}
}

// benchCECmd is `lcc bench ce`: the fused output projection and cross-entropy
// (forward and backward, in row chunks) beside PyTorch's unfused anchor.
func benchCECmd(bf *benchFlags) *cobra.Command {
	var m memShape
	cmd := &cobra.Command{
		Use:   "ce",
		Short: "fused linear cross-entropy forward+backward: time and extra memory",
		Long: `ce times fused_linear_cross_entropy and its gradient (h [T, d], W [V, d], mean
over rows, as attention.py ce) with CUDA events. Extra memory is what the program
needs beyond its inputs and outputs (h, W, labels, loss, dh, dW): from the arena
plan, and measured with cuMemGetInfo before the program is loaded and after its
first run (arena, kernels and the cuBLASLt workspace).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			storage, err := m.check()
			if err != nil {
				return err
			}
			b, done, err := bf.open()
			if err != nil {
				return err
			}
			defer done()
			// The workload is an IR function, compiled and run as any program is, so the
			// bench times the kernels lcc emits, not a hand-launched kernel.
			f, err := perf.CEFunc(m.t, m.d, m.v)
			if err != nil {
				return err
			}
			// The anchor's inputs at a fixed seed, so the printed loss repeats run to run.
			p, err := perf.MeasureProgram(b.Dev, f, perf.CEInputs(m.t, m.d, m.v, 1), storage, bf.warm, bf.iters)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "lcc bench ce: T=%d d=%d V=%d %s on %s (logits chunk budget %d MiB)\n",
				// The chunk budget bounds the logits held at once, which is what the extra
				// memory figure below mostly measures.
				m.t, m.d, m.v, m.precision, b.Dev.Name(), codegen.CEChunkBytes>>20)
			// Both figures: the plan is what lcc promises, cuMemGetInfo what the driver saw,
			// and a gap between them points at memory outside the arena. The loss is a cheap
			// check that the timed program computed something sensible.
			fmt.Fprintf(w, "lcc: extra memory %.2f GiB (arena plan), %.2f GiB (cuMemGetInfo); loss %.4f\n",
				perf.GiB(p.PlanExtra), perf.GiB(p.MeasuredExtra), p.Outputs["loss"].F[0])
			rows, err := bf.anchorRows(w, "attention.py", m.anchorArgs("ce")...)
			if err != nil {
				return err
			}
			var anchors []perf.Result
			for _, r := range rows {
				gib, _ := r.Float("peak_extra_gib")
				fmt.Fprintf(w, "%s: extra memory %.2f GiB (torch peak)\n", r.Name(), gib)
				anchors = append(anchors, perf.AnchorResult(r, "fwdbwd"))
			}
			// Three T×d×V matmuls (logits, dh, dW) at 2 FLOPs per multiply-add.
			tf := 6 * float64(m.t) * float64(m.d) * float64(m.v) / (p.Ms() * 1e9)
			return perf.Compare(w, fmt.Sprintf("ce T=%d d=%d V=%d %s", m.t, m.d, m.v, m.precision),
				perf.Result{Who: "lcc", Figures: []perf.Figure{{Phase: "fwdbwd", Ms: p.Ms(), TFLOPs: tf}}},
				anchors, "fwdbwd")
		},
	}
	// 64K tokens: with the default V, unfused logits would take 4 GiB in bf16, the
	// memory that fusing the projection with the loss saves.
	m.add(cmd, 65536)
	return cmd
}

// benchEmbedCmd is `lcc bench embed`: the embedding gather and its scatter-add
// gradient beside PyTorch's.
func benchEmbedCmd(bf *benchFlags) *cobra.Command {
	var m memShape
	cmd := &cobra.Command{
		Use:   "embed",
		Short: "embedding lookup and its gradient (scatter_add): time and extra memory",
		Long: `embed times the embedding lookup W[ids] (W [V, d], ids [T]) and its gradient
scatter_add(dy, ids) into [V, d] separately, with CUDA events. The anchor
(attention.py embed) reports its forward and forward+backward; its backward is
their difference.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			storage, err := m.check()
			if err != nil {
				return err
			}
			b, done, err := bf.open()
			if err != nil {
				return err
			}
			defer done()
			// Forward and backward are separate programs so the scatter-add, whose atomics
			// are the slow part, gets a time of its own.
			fwd, bwd, err := perf.EmbedFuncs(m.t, m.d, m.v)
			if err != nil {
				return err
			}
			// Seed 1, as for ce: the same ids every run, so the atomics' conflicts repeat.
			fin, bin := perf.EmbedInputs(m.t, m.d, m.v, 1)
			pf, err := perf.MeasureProgram(b.Dev, fwd, fin, storage, bf.warm, bf.iters)
			if err != nil {
				return err
			}
			pb, err := perf.MeasureProgram(b.Dev, bwd, bin, storage, bf.warm, bf.iters)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "lcc bench embed: T=%d d=%d V=%d %s on %s\n", m.t, m.d, m.v, m.precision, b.Dev.Name())
			// Only the backward's memory is reported: the forward's output is the gather itself.
			fmt.Fprintf(w, "lcc: backward extra memory %.3f GiB (arena plan), %.3f GiB (cuMemGetInfo)\n",
				perf.GiB(pb.PlanExtra), perf.GiB(pb.MeasuredExtra))
			rows, err := bf.anchorRows(w, "attention.py", m.anchorArgs("embed")...)
			if err != nil {
				return err
			}
			var anchors []perf.Result
			for _, r := range rows {
				a := perf.AnchorResult(r, "fwd", "fwdbwd")
				// PyTorch cannot time its backward alone here; the script reports fwdbwd − fwd.
				if bw, ok := r.Float("bwd_ms_approx"); ok {
					a.Figures = append(a.Figures, perf.Figure{Phase: "bwd", Ms: bw})
				}
				anchors = append(anchors, a)
			}
			// lcc's fwdbwd is the sum of the two programs, as the anchor's is one step of both.
			lcc := perf.Result{Who: "lcc", Figures: []perf.Figure{{Phase: "fwd", Ms: pf.Ms()},
				{Phase: "bwd", Ms: pb.Ms()}, {Phase: "fwdbwd", Ms: pf.Ms() + pb.Ms()}}}
			return perf.Compare(w, fmt.Sprintf("embed T=%d d=%d V=%d %s", m.t, m.d, m.v, m.precision),
				lcc, anchors, "fwd", "bwd", "fwdbwd")
		},
	}
	// A million ids: each row of the default vocabulary is hit about 32 times, so the
	// gradient's atomic conflicts are part of what is timed.
	m.add(cmd, 1048576)
	return cmd
}
