package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/train"
	"github.com/lcc-dev/lcc/train/eval"
	"github.com/lcc-dev/lcc/train/plot"
)

// evalCmd is `lcc eval`: perplexity over held-out windows, or pass-key
// retrieval over lengths and depths (package train/eval).
func evalCmd() *cobra.Command {
	var (
		// lcc run's device flags: the same runners, so a forward scores here as it
		// runs there.
		df     deviceFlags
		shapes []string
		batch  int
		// The perplexity flags write into po directly; the pass-key ones are parsed in
		// RunE, where --lengths takes K and M suffixes.
		po                    eval.PerplexityOptions
		passkey               bool
		lengths, depths, hmap string
		// 10 prompts of 5 digits: 50 digits per cell, a standard error of about 0.07 at most
		// on its accuracy; raise --trials to tell cells apart more finely.
		trials int
		seed   uint64
		rf     ropeFlags
	)
	cmd := &cobra.Command{
		Use:   "eval MODEL|CHECKPOINT_DIR (--data tokens:FILE --seq-len N | --passkey --lengths 4K,16K --depths 0,50,100)",
		Short: "perplexity over held-out windows, or pass-key retrieval accuracy per (length, depth) with a heat map",
		Long: `eval scores a model file (.onnx, .lcc) or the newest valid checkpoint of an lcc train
--checkpoint-dir (its run's model with the trained weights) on the CPU interpreter
(--device=cpu, f32) or GPU 0 (--device=cuda).

With --data tokens:FILE (or bytes:FILE) it scores the first --windows windows of
--seq-len tokens of the file (0: all), read as lcc train reads them (window k covers
tokens k·T .. k·T+T), and prints the mean cross-entropy per token and the perplexity,
exp(mean loss).

With --passkey it builds synthetic:passkey prompts at every --lengths and --depths
(percent of the filler before the needle), --trials per cell from --seed, and prints
the teacher-forced accuracy of the key's five digits (chance 0.1) per cell;
--heatmap FILE.png draws the table as the needle-in-a-haystack plots do.

--rope-theta and --rope-scaling rewrite the rotary frequencies as they do for lcc
compile and train, and the rope lines say which were used. A checkpoint does not
record them: evaluate a run trained with them by giving the same flags again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// HostBudget bounds the package's own CPU interpreter, used when o.Run stays
			// nil (the default device and precision). Log is stderr: which checkpoint was
			// read is context for the scores on stdout, not one of them.
			o := eval.Options{Model: args[0], Batch: batch, Log: cmd.ErrOrStderr(),
				HostBudget: driver.NewHostBudget(int64(df.hostBudget))}
			var err error
			if o.Shape, err = driver.ParseShapeFlags(shapes); err != nil {
				return err
			}
			// Before any model is read, so a bad value is a flag error.
			if o.RoPE, err = rf.config(); err != nil {
				return err
			}
			// Before any forward, so that a wrong extension does not cost the evaluation.
			if hmap != "" {
				if !passkey {
					return fmt.Errorf("--heatmap draws the pass-key table: it needs --passkey")
				}
				if err := plot.CheckFormat(hmap); err != nil {
					return fmt.Errorf("--heatmap %w", err)
				}
			}
			// Exactly one mode: the two score different things and print different tables.
			if passkey == (po.Data != "") {
				return fmt.Errorf("give --data tokens:FILE (perplexity) or --passkey (retrieval), one of them")
			}
			// The CPU in f32 is package eval's own interpreter; anything else needs a runner,
			// held until every length is scored.
			if df.device != "cpu" || df.precision != "fp32" {
				release, err := evalDevice(&o, df)
				if err != nil {
					return err
				}
				defer release()
			}
			out := cmd.OutOrStdout()
			if !passkey {
				// Refused, not ignored: they would suggest a table that perplexity never
				// draws. --depths has a default, hence Changed.
				if lengths != "" || cmd.Flags().Changed("depths") {
					return fmt.Errorf("--lengths and --depths are for --passkey")
				}
				r, err := eval.ScorePerplexity(o, po)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "perplexity %.6g  mean loss %.6f  over %d windows of %d tokens (%d tokens) of %s\n",
					r.PPL, r.MeanLoss, r.Windows, po.SeqLen, r.Tokens, po.Data)
				printEvalRoPE(out, "", r.RoPE)
				return nil
			}
			// The seed fixes every cell's prompts: two models scored with one seed see the
			// same keys and filler, so their tables compare cell by cell.
			pk := eval.PasskeyOptions{Trials: trials, Seed: seed}
			if pk.Lengths, err = parseLengths(lengths); err != nil {
				return err
			}
			if pk.Depths, err = parseDepths(depths); err != nil {
				return err
			}
			r, err := eval.ScorePasskey(o, pk)
			if err != nil {
				return err
			}
			fmt.Fprint(out, r.Table())
			// One forward per length, so one set of rope lines each: dynamic scaling
			// differs from length to length.
			for i, rope := range r.RoPE {
				printEvalRoPE(out, "at "+eval.LengthLabel(r.Lengths[i])+": ", rope)
			}
			if hmap != "" {
				// The model or folder as given, so that a plot names what it scored.
				title := "pass-key retrieval: " + args[0]
				if err := r.Heatmap(hmap, title); err != nil {
					return err
				}
				fmt.Fprintf(out, "heatmap: %s\n", hmap)
			}
			return nil
		},
	}
	f := cmd.Flags()
	df.add(cmd)
	// The same helper as compile's and train's, so the three parse and validate the
	// RoPE flags alike.
	rf.add(cmd)
	f.StringArrayVar(&shapes, "shape", nil, "bind a named dim: NAME=VALUE (repeatable), as lcc compile does")
	f.IntVar(&batch, "batch", 0, "sequences per forward (binds the model's batch dim; default 1, or the "+
		"model's static batch)")
	f.StringVar(&po.Data, "data", "", "held-out tokens for perplexity: tokens:FILE or bytes:FILE")
	// 2, as lcc train's default: nanoGPT's uint16 train.bin and val.bin.
	f.IntVar(&po.TokenBytes, "token-bytes", 2, "bytes per token of tokens:FILE: 2 (uint16) or 4 (uint32)")
	f.IntVar(&po.SeqLen, "seq-len", 0, "tokens per window scored (perplexity)")
	f.IntVar(&po.Windows, "windows", 0, "windows scored from the start of the file (0: all)")
	f.BoolVar(&passkey, "passkey", false, "measure pass-key retrieval per (length, depth)")
	f.StringVar(&lengths, "lengths", "", "pass-key prompt lengths, comma-separated: 4K,16K,64K (K = 1024)")
	// The quartiles: the start, the end and three depths between, a coarse form of
	// the needle-in-a-haystack plots' depth axis.
	f.StringVar(&depths, "depths", "0,25,50,75,100", "needle depths in percent of the filler, comma-separated")
	f.IntVar(&trials, "trials", 10, "pass-key prompts per (length, depth)")
	f.Uint64Var(&seed, "seed", 0, "seed of the pass-key prompts")
	f.StringVar(&hmap, "heatmap", "", "draw the pass-key accuracies to FILE (.png, .svg or .pdf)")
	return cmd
}

// printEvalRoPE prints what rescale-rope rewrote (nothing for nil) as lcc
// train's rope lines, after the scores so that their first line stays the
// result; at names the length of a pass-key forward.
func printEvalRoPE(out io.Writer, at string, r *passes.RoPEResult) {
	if r == nil {
		return
	}
	for _, l := range report.RoPELines(*r) {
		fmt.Fprintf(out, "rope    %s%s\n", at, l)
	}
}

// evalDevice points o at the flags' device: a GPU session whose arena for a
// length is freed before the next length's, or the CPU with emulated storage.
func evalDevice(o *eval.Options, df deviceFlags) (func(), error) {
	// Validated before a GPU is opened.
	storage, err := df.storage()
	if err != nil {
		return nil, err
	}
	switch df.device {
	case "cpu":
		// The CPU runner rounds to --precision=bf16 what a GPU would store in bf16.
		run, release, err := df.runner()
		o.Run = run
		return release, err
	case "cuda":
		dev, err := cuda.Open(0)
		if err != nil {
			return nil, fmt.Errorf("--device=cuda: %w", err)
		}
		// One session for every length; Release frees a length's arena before the next
		// is built, since at long lengths two arenas may not fit beside each other.
		s := exec.NewSession(dev, exec.Options{Storage: storage})
		o.Run = s.Run
		o.Release = func(f *ir.Func) { s.Release(f) }
		// The session's buffers belong to the device: close it first.
		return func() {
			s.Close()
			dev.Close()
		}, nil
	}
	return nil, fmt.Errorf("--device %q: want cpu or cuda", df.device)
}

// parseLengths reads --lengths: 4K,16K,65536.
func parseLengths(s string) ([]int, error) {
	// No default: what lengths to probe depends on the model's trained length, which
	// the model file does not record.
	if s == "" {
		return nil, fmt.Errorf("--lengths: required with --passkey (e.g. 4K,16K,64K)")
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		// train.ParseLength, as --seq-len-schedule reads lengths: 4K is 4096.
		n, err := train.ParseLength(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--lengths %q: %w", s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseDepths reads --depths: percentages 0..100.
func parseDepths(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		// "50%" reads as 50; the negated range test refuses NaN too.
		d, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(p, "%")), 64)
		if err != nil || !(d >= 0 && d <= 100) {
			return nil, fmt.Errorf("--depths %q: %q is not a percentage 0..100", s, p)
		}
		out = append(out, d)
	}
	return out, nil
}
