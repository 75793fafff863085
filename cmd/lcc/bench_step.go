package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/train"
)

// benchStepCmd is `lcc bench step MODEL`: one training step of MODEL on the
// GPU, with the state resident, timed on the wall clock (the median of --iters
// steps after --warmup), with its GPU time per kernel family, beside
// flagship.py's PyTorch step when the model is the flagship and --anchors is set.
func benchStepCmd(bf *benchFlags) *cobra.Command {
	// Start from lcc train's defaults, so the bench times the step a plain lcc train
	// with the same flags would run.
	cfg := train.DefaultConfig()
	var cf compileFlags
	cmd := &cobra.Command{
		Use:   "step MODEL --seq-len N",
		Short: "one training step (forward, backward, AdamW) of a model, state resident on the GPU",
		Long: `bench step trains MODEL on GPU 0 for --warmup + --iters steps on synthetic:copy
data, with the pipeline lcc train runs for the same flags and the training state
resident on the GPU, and prints the median wall-clock step time, tokens/s, the GPU
time per kernel family per step (CUDA events), the planned and measured peak
memory and the host traffic per step. With --anchors DIR and a model named
flagship*.onnx it also runs DIR/flagship.py train at the same length in the same
command (bf16, dense or dilated attention as --attention, naive cross-entropy)
and prints the ratio of its step time to lcc's (above 1: lcc is faster).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			// Checked before opening the GPU: a bad count should not cost a device session.
			if bf.iters < 1 || bf.warm < 0 {
				return fmt.Errorf("--iters %d, --warmup %d: want iters ≥ 1 and warmup ≥ 0", bf.iters, bf.warm)
			}
			t, o, err := cf.options()
			if err != nil {
				return err
			}
			// synthetic:copy needs no dataset on the machine and keeps every step the same
			// shape, so step times compare across runs and against the anchor.
			cfg.Model, cfg.Device, cfg.Data = args[0], "cuda", "synthetic:copy"
			cfg.Target, cfg.Loss, cfg.Attention, cfg.Checkpoint = t, o.Loss, o.Attention, o.Checkpoint
			cfg.MemoryBudget, cfg.Precision, cfg.CUDAGraph = o.MemoryBudget, o.Precision, o.CUDAGraph
			cfg.Fuse = o.Fuse
			cfg.OptimizerState, cfg.OptimizerUpdate = o.OptimizerState, o.OptimizerUpdate
			// No progress lines: printing inside the loop would add host time to the timed steps.
			cfg.Steps, cfg.ProgressEvery, cfg.Log = bf.warm+bf.iters, 0, cmd.ErrOrStderr()
			df := deviceFlags{device: "cuda", precision: o.Precision}
			// Profile on: the per-kernel-family GPU times printed below come from it.
			s, meter, release, err := df.session(true)
			if err != nil {
				return err
			}
			defer release()
			// The session holds the training state across steps, as lcc train --device=cuda
			// does, so the steps timed move no weights between host and GPU.
			cfg.Session, cfg.Memory, cfg.Run = s, meter, s.Run
			res, err := train.Train(cfg)
			if err != nil {
				return err
			}
			// The median, not the mean: a single step stalled by the host or by a lazy
			// kernel load would otherwise move the figure.
			timed := slices.Clone(res.StepTimes[bf.warm:])
			slices.Sort(timed)
			med := timed[len(timed)/2]
			// Tokens per step, for tokens/s: the figure the anchor prints too.
			tokens := float64(cfg.Batch * cfg.SeqLen)
			fmt.Fprintf(w, "lcc bench step: %s, batch %d × %d tokens, %s, on %s\n", filepath.Base(cfg.Model),
				cfg.Batch, cfg.SeqLen, o.Precision, s.Device().Name())
			fmt.Fprintf(w, "  lcc   step %9.2f ms (median of %d)  %10.0f tokens/s  planned peak %s  measured peak %s  "+
				"host %d bytes/step\n", ms(med), len(timed), tokens/med.Seconds(), report.Bytes(res.PlannedPeakBytes),
				report.Bytes(res.MeasuredPeakBytes), res.HostBytes)
			if res.ProfileSteps > 0 {
				printProfile(w, res)
			}
			if bf.anchors == "" {
				return nil
			}
			// The anchor is a hand-written PyTorch model of the flagship at batch 1; any
			// other model or batch has no like-for-like PyTorch step to compare with.
			if !strings.HasPrefix(filepath.Base(cfg.Model), "flagship") || cfg.Batch != 1 {
				fmt.Fprintln(w, "anchor skipped: flagship.py trains the flagship model at batch 1")
				return nil
			}
			// flagship.py knows only dense and dilated; every other lcc mode times against dense.
			attn := "dense"
			if o.Attention.Mode == "dilated" {
				attn = "dilated"
			}
			rows, err := bf.anchorRows(w, "flagship.py", "train", "--T", strconv.Itoa(cfg.SeqLen), "--attn", attn,
				// naive: plain cross-entropy over materialised logits, the simplest PyTorch baseline.
				"--ce", "naive")
			if err != nil {
				return err
			}
			for _, r := range rows {
				if e := r.Err(); e != "" {
					fmt.Fprintf(w, "  %-5s %s\n", r.Name(), e)
					continue
				}
				// A row without step_s is a note from the script, not a timing; skip it.
				st, ok := r.Float("step_s")
				if !ok {
					continue
				}
				tps, _ := r.Float("tokens_per_s")
				peak, _ := r.Float("peak_gib")
				// Against lcc's median: above 1, lcc's step is the faster.
				fmt.Fprintf(w, "  %s step %9.2f ms  %10.0f tokens/s  peak %.2f GiB  (anchor/lcc step time %.3f)\n",
					r.Name(), 1e3*st, tps, peak, st/med.Seconds())
			}
			return nil
		},
	}
	cf.add(cmd)
	f := cmd.Flags()
	// No default length: a step's time depends on it above all, so it must be said.
	f.IntVar(&cfg.SeqLen, "seq-len", 0, "tokens per sequence (binds the model's seq dim)")
	// Batch 1: the batch flagship.py's anchor trains at.
	f.IntVar(&cfg.Batch, "batch", 1, "sequences per step (binds the model's batch dim)")
	// The rate changes the losses, not the step's time.
	f.Float64Var(&cfg.LR, "lr", cfg.LR, "peak learning rate")
	return cmd
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
