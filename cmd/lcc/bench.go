package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	fk "github.com/lcc-dev/lcc/codegen/cuda/flash"
	"github.com/lcc-dev/lcc/perf"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// benchFlags are shared by every `lcc bench` workload.
// anchors is the folder of PyTorch anchor scripts; empty skips the anchors.
// warm and iters are the untimed and timed runs; tier picks the attention kernel tier.
type benchFlags struct {
	anchors     string
	warm, iters int
	tier        int
}

// tierOf is --tier, or the tier lcc picks for the device when it is 0.
func (bf *benchFlags) tierOf(b *perf.Bench) (int, error) {
	switch bf.tier {
	// 0 defers to the device: wgmma (tier 2) needs sm_90a, older GPUs take mma.sync.
	case 0:
		return perf.TierFor(b.Dev), nil
	case 1, 2:
		return bf.tier, nil
	}
	return 0, fmt.Errorf("--tier %d: want 0 (the device's), 1 (mma.sync) or 2 (wgmma, sm_90a)", bf.tier)
}

// benchCmd is `lcc bench WORKLOAD`: one operation or step timed on GPU 0 with
// CUDA events, beside the PyTorch anchors of --anchors run in the same command.
// Each workload is a subcommand; add new ones to the list below.
func benchCmd() *cobra.Command {
	// Shared by pointer: the subcommands read the persistent flags parsed here.
	bf := &benchFlags{}
	// No RunE: lcc bench alone prints its help, which lists the workloads.
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD",
		Short: "time one operation on the GPU beside its PyTorch anchor",
		Long: `bench times one operation on GPU 0 with CUDA events (warm-up runs, then the
median of --iters runs) and prints its time and TFLOP/s. With --anchors DIR it also
runs the PyTorch anchor scripts in DIR (a copy of the project's bench folder) in the
same command, at the same shape, and prints the ratio of their time to lcc's
(above 1: lcc is faster).`,
	}
	// Persistent: every workload below takes the same timing flags.
	// No anchors by default: they need python3 and PyTorch, which a GPU host for
	// lcc need not have.
	cmd.PersistentFlags().StringVar(&bf.anchors, "anchors", "", "folder with the PyTorch anchor scripts (attention.py ...)")
	// Two untimed runs: the first builds and loads the kernels, so only later runs
	// time the kernels alone.
	cmd.PersistentFlags().IntVar(&bf.warm, "warmup", 2, "untimed runs before timing")
	// Odd, so the median perf reports is the middle run itself.
	cmd.PersistentFlags().IntVar(&bf.iters, "iters", 5, "timed runs (the median is reported)")
	cmd.PersistentFlags().IntVar(&bf.tier, "tier", 0, "attention kernel tier: 1 (mma.sync), 2 (wgmma, sm_90a); 0: 2 on sm_90, else 1")
	cmd.AddCommand(benchAttentionCmd(bf), benchDilatedCmd(bf), benchCECmd(bf), benchEmbedCmd(bf), benchStepCmd(bf))
	return cmd
}

// open opens GPU 0, a stream and the kernel cache, and returns the function that
// closes them.
func (bf *benchFlags) open() (*perf.Bench, func(), error) {
	// Validate the counts before opening a device, which is slow and may be shared.
	if bf.iters < 1 || bf.warm < 0 {
		return nil, nil, fmt.Errorf("--iters %d, --warmup %d: want iters ≥ 1 and warmup ≥ 0", bf.iters, bf.warm)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return nil, nil, fmt.Errorf("bench needs a GPU: %w", err)
	}
	st, err := dev.NewStream()
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	// The on-disk kernel cache is the one lcc's other commands use, so kernels built
	// once are not rebuilt by every bench run.
	dir, err := cuda.DefaultCacheDir()
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	cache, err := cuda.OpenCache(dir)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	b := &perf.Bench{Dev: dev, Stream: st, Cache: cache, Warm: bf.warm, Iters: bf.iters}
	// Release in reverse order of opening: the cache's modules and the stream belong
	// to the device's context.
	return b, func() { b.Close(); st.Destroy(); dev.Close() }, nil
}

// anchorRows runs DIR/script with args when --anchors is set.
func (bf *benchFlags) anchorRows(w io.Writer, script string, args ...string) ([]perf.AnchorRow, error) {
	if bf.anchors == "" {
		return nil, nil
	}
	// Echo the exact command so a surprising anchor figure can be reproduced by hand.
	fmt.Fprintf(w, "anchor: python3 %s/%s %v\n", bf.anchors, script, args)
	// The script's own messages (PyTorch's warnings) go to stderr, apart from the table.
	return perf.RunAnchor(context.Background(), bf.anchors, script, args, os.Stderr)
}

// benchAttentionCmd is `lcc bench attention`: dense attention's forward and
// backward on GPU 0 in the flash tier the GPU takes (or --tier), beside
// PyTorch's SDPA backends run in the same command (perf.Attention).
func benchAttentionCmd(bf *benchFlags) *cobra.Command {
	var s perf.AttentionShape
	// Empty: one run with the kernel's own tiles; a list sweeps them.
	var tiles string
	var noCausal bool
	cmd := &cobra.Command{
		Use:   "attention",
		Short: "dense (or grouped-query) causal attention, bf16, forward and forward+backward",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			// The flag is negative because causal is the default and the anchors time only causal.
			s.Causal = !noCausal
			// 0 means plain multi-head attention: one key/value head per query head.
			if s.Hkv == 0 {
				s.Hkv = s.H
			}
			// Grouped-query attention shares each kv head among H/Hkv query heads, so the
			// division must be exact.
			if s.T <= 0 || s.B <= 0 || s.H <= 0 || s.Hkv <= 0 || s.H%s.Hkv != 0 {
				return fmt.Errorf("--T %d --B %d --H %d --Hkv %d: want positive sizes and H a multiple of Hkv",
					s.T, s.B, s.H, s.Hkv)
			}
			if s.Docs > 1 && !s.Causal {
				return fmt.Errorf("--docs %d with --no-causal: a document mask is causal", s.Docs)
			}
			if s.Docs < 0 || int64(s.Docs) > s.T {
				return fmt.Errorf("--docs %d: want 0 to --T documents", s.Docs)
			}
			if s.Window < 0 || s.Window > 0 && !s.Causal {
				return fmt.Errorf("--window %d: want a positive number of keys, with causal attention", s.Window)
			}
			// One zero configuration: every field 0 takes the kernel's own default tiles.
			ts := []perf.Tiles{{}}
			if tiles != "" {
				var err error
				if ts, err = perf.ParseTiles(tiles); err != nil {
					return fmt.Errorf("--tiles: %w", err)
				}
			}
			b, done, err := bf.open()
			if err != nil {
				return err
			}
			defer done()
			tier, err := bf.tierOf(b)
			if err != nil {
				return err
			}
			for i := range ts {
				// A sweep entry without a tier runs in --tier (tier 1 above head dim
				// 128, as a compiled program does), so a sweep can mix tiers.
				if ts[i].Tier == 0 {
					ts[i].Tier = fk.TierForHeadDim(tier, s.D)
				}
			}
			// The shape and the GPU head the output: figures from different devices must not
			// be read as one another's.
			fmt.Fprintf(w, "lcc bench attention: B=%d T=%d H=%d Hkv=%d D=%d causal=%v docs=%d window=%d on %s\n",
				s.B, s.T, s.H, s.Hkv, s.D, s.Causal, max(s.Docs, 1), s.Window, b.Dev.Name())
			// Print the rows that ran before looking at err: a sweep that fails on one
			// configuration still reports the others.
			rows, err := b.Attention(s, ts)
			for _, r := range rows {
				res := r.Result(s)
				fmt.Fprintf(w, "  %-48s fwd %8.3f ms %6.1f TFLOP/s | bwd %8.3f ms %6.1f (dkdv %.3f, dq %.3f) | fwd+bwd %8.3f ms %6.1f TFLOP/s\n",
					r.Tiles, r.Fwd.Ms(), res.Figures[0].TFLOPs, r.Bwd.Ms(), res.Figures[1].TFLOPs,
					r.DKDV.Ms(), r.DQ.Ms(), r.FwdBwd.Ms(), res.Figures[2].TFLOPs)
			}
			if err != nil {
				return err
			}
			// Compare the fastest configuration by fwd+bwd, the figure training pays.
			best := rows[0]
			for _, r := range rows {
				if r.FwdBwd.Median < best.FwdBwd.Median {
					best = r
				}
			}
			if s.Docs > 1 || s.Window > 0 {
				// The yardstick of packed documents or a window is the same tokens
				// as one dense causal sequence, timed here with the same tiles: what
				// the mask saves, which it does only if its masked tiles are skipped.
				one := s
				one.Docs, one.Window = 0, 0
				plain, err := b.Attention(one, []perf.Tiles{best.Tiles})
				if err != nil {
					return err
				}
				p := plain[0]
				what := fmt.Sprintf("packed %d documents", s.Docs)
				if s.Window > 0 {
					what = fmt.Sprintf("a sliding window of %d keys", s.Window)
					if s.Docs > 1 {
						what += fmt.Sprintf(" over %d packed documents", s.Docs)
					}
				}
				fmt.Fprintf(w, "  one causal sequence of %d tokens: fwd %.3f ms | fwd+bwd %.3f ms\n", s.T, p.Fwd.Ms(), p.FwdBwd.Ms())
				fmt.Fprintf(w, "%s vs one causal sequence: fwd %.2fx, fwd+bwd %.2fx faster\n",
					what, p.Fwd.Ms()/best.Fwd.Ms(), p.FwdBwd.Ms()/best.FwdBwd.Ms())
				if bf.anchors != "" {
					fmt.Fprintln(w, "anchor skipped: attention.py dense has no document mask or sliding window")
				}
				return nil
			}
			args := []string{"dense", "--T", strconv.FormatInt(s.T, 10), "--H", strconv.Itoa(s.H),
				"--Hkv", strconv.Itoa(s.Hkv), "--D", strconv.Itoa(s.D), "--B", strconv.FormatInt(s.B, 10)}
			mask := "causal"
			if !s.Causal {
				args, mask = append(args, "--no-causal"), "bidirectional"
			}
			arows, err := bf.anchorRows(w, "attention.py", args...)
			if err != nil {
				return err
			}
			var anchors []perf.Result
			for _, r := range arows {
				anchors = append(anchors, perf.AnchorResult(r, "fwd", "fwdbwd"))
			}
			return perf.Compare(w, fmt.Sprintf("attention B=%d T=%d H=%d Hkv=%d D=%d %s bf16 (lcc: %s)",
				s.B, s.T, s.H, s.Hkv, s.D, mask, best.Tiles), best.Result(s), anchors, "fwd", "bwd", "fwdbwd")
		},
	}
	// 32K tokens, 8 heads of 128 by default: long enough that the kernels, not their
	// launches, are what is timed.
	f := cmd.Flags()
	f.Int64Var(&s.B, "B", 1, "batch")
	f.Int64Var(&s.T, "T", 32768, "sequence length")
	f.IntVar(&s.H, "H", 8, "query heads")
	f.IntVar(&s.Hkv, "Hkv", 0, "key/value heads (grouped-query); 0: same as --H")
	f.IntVar(&s.D, "D", 128, "head dim (a multiple of 8 up to 256 on the tensor cores: below 128 padded to 64 or 128, above it tier 1 padded to 256)")
	f.BoolVar(&noCausal, "no-causal", false, "attend to every key (bidirectional, as encoders do)")
	f.IntVar(&s.Docs, "docs", 0, "pack this many equal documents into each sequence (a document mask), "+
		"and time one causal sequence of the same tokens beside it")
	f.Int64Var(&s.Window, "window", 0, "a sliding window of this many keys (Mistral-style local attention), "+
		"and time one dense causal sequence of the same tokens beside it")
	f.StringVar(&tiles, "tiles", "", "tile configurations to sweep: Br,Bc,BwdBr,BwdBc,DQBr,DQBc,Stages[,WM,DQWM[,DQ[,Tier[,Split]]]];... (0: default; DQ 1 fused, 2 split; Tier 0: --tier; Split 1: tier 2's grouped-query backward one CTA per query head)")
	return cmd
}

// benchDilatedCmd is `lcc bench dilated`: LongNet's dilated attention at T
// tokens beside the PyTorch implementation of the same branches (perf.Dilated).
func benchDilatedCmd(bf *benchFlags) *cobra.Command {
	s := perf.DilatedShape{}
	// Parsed in RunE: --dq and --tiles both set the backward's dQ mode; a --dq other
	// than auto wins.
	var dq, tileSpec string
	cmd := &cobra.Command{
		Use:   "dilated",
		Short: "LongNet dilated attention (causal, paper offsets), bf16, forward and forward+backward",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			// LongNet pairs each segment length with one dilation; the lists must line up.
			if s.T <= 0 || s.H <= 0 || len(s.Segments) == 0 || len(s.Segments) != len(s.Dilations) {
				return fmt.Errorf("--T %d --H %d --segments %v --dilations %v: want positive sizes and one dilation per segment",
					s.T, s.H, s.Segments, s.Dilations)
			}
			for i := range s.Segments {
				if s.Segments[i] <= 0 || s.Dilations[i] <= 0 {
					return fmt.Errorf("--segments %v --dilations %v: want positive values", s.Segments, s.Dilations)
				}
			}
			tiles := perf.Tiles{}
			if tileSpec != "" {
				// One configuration: every branch runs with it, and there is no sweep here.
				ts, err := perf.ParseTiles(tileSpec)
				if err != nil || len(ts) != 1 {
					return fmt.Errorf("--tiles %q: want one configuration (%v)", tileSpec, err)
				}
				tiles = ts[0]
			}
			// dQ can be summed inside the dK/dV kernels (fused, no extra pass) or in a
			// kernel of its own (split, no fixed-point rounding); auto lets the kernel choose.
			switch dq {
			case "auto":
			case "fused":
				tiles.DQ = int(fk.DQFused)
			case "split":
				tiles.DQ = int(fk.DQSplit)
			default:
				return fmt.Errorf("--dq %q: want auto, fused or split", dq)
			}
			b, done, err := bf.open()
			if err != nil {
				return err
			}
			defer done()
			// A tier given in --tiles wins over --tier.
			if tiles.Tier == 0 {
				if tiles.Tier, err = bf.tierOf(b); err != nil {
					return err
				}
			}
			fmt.Fprintf(w, "lcc bench dilated: T=%d H=%d D=%d segments %v dilations %v on %s\n",
				s.T, s.H, s.D, s.Segments, s.Dilations, b.Dev.Name())
			row, err := b.Dilated(s, tiles)
			if err != nil {
				return err
			}
			// At a million tokens the backward's side buffers matter as much as time, and
			// the anchor reports the same figure for comparison.
			fmt.Fprintf(w, "  extra memory (lse, delta, fp32 accumulators): %.2f GiB\n", float64(row.ExtraBytes)/(1<<30))
			var anchors []perf.Result
			arows, err := bf.anchorRows(w, "attention.py", "dilated", "--T", strconv.FormatInt(s.T, 10),
				"--H", strconv.Itoa(s.H), "--D", strconv.Itoa(s.D))
			if err != nil {
				return err
			}
			for _, r := range arows {
				anchors = append(anchors, perf.AnchorResult(r, "fwd", "fwdbwd"))
				if g, ok := r.Float("fwdbwd_peak_extra_gib"); ok {
					fmt.Fprintf(w, "  anchor %s extra memory: %.2f GiB\n", r.Name(), g)
				}
			}
			return perf.Compare(w, fmt.Sprintf("dilated T=%d H=%d D=%d causal bf16", s.T, s.H, s.D),
				row.Result(s), anchors, "fwd", "bwd", "fwdbwd")
		},
	}
	// A million tokens: the lengths dilated attention exists for, where dense
	// attention's quadratic cost rules it out.
	f := cmd.Flags()
	f.Int64Var(&s.T, "T", 1048576, "sequence length")
	f.IntVar(&s.H, "H", 8, "heads")
	f.IntVar(&s.D, "D", 128, "head dim (a multiple of 8 up to 128 on the tensor cores; 96 runs the 128 kernels padded)")
	// The defaults follow the LongNet paper's geometric schedule: each branch
	// doubles both the segment and the dilation.
	f.Int64SliceVar(&s.Segments, "segments", []int64{2048, 4096, 8192, 16384, 32768}, "segment lengths w")
	f.Int64SliceVar(&s.Dilations, "dilations", []int64{1, 2, 4, 8, 16}, "dilations r, one per segment")
	f.StringVar(&dq, "dq", "auto", "backward: auto, fused (dQ in a fixed-point sum inside the dK/dV kernels) or split")
	f.StringVar(&tileSpec, "tiles", "", "one tile configuration of the branches: Br,Bc,BwdBr,BwdBc,DQBr,DQBc,Stages[,WM,DQWM[,DQ]] (0: default; --dq other than auto overrides DQ)")
	return cmd
}
