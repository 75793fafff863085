package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/train/export"
)

// exportCmd is `lcc export`: trained weights out of a checkpoint folder.
func exportCmd() *cobra.Command {
	var (
		format, out string
		step        int
	)
	cmd := &cobra.Command{
		Use:   "export CHECKPOINT_DIR --format=safetensors|onnx -o FILE",
		Short: "write trained weights under PyTorch's parameter names (safetensors) or into the ONNX model",
		Long: `export reads the newest valid checkpoint in CHECKPOINT_DIR (or --step N) and writes its
trained weights:

  --format=safetensors  a safetensors file keyed by PyTorch's parameter names, as the
                        exporter's provenance gives them (torch.export's graph signature;
                        a folded Linear weight "val_9" = Wᵀ is written as W), so that
                        model.load_state_dict(safetensors.torch.load_file(FILE)) works.
                        Constants the exporter stored as initializers and the optimizer
                        state are left out.
  --format=onnx         the ONNX model the run trained, with the trained initializers
                        (parameters the exporter merged or dropped get initializers of
                        their own, read by the nodes that read them in PyTorch).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// -o has no default: export never guesses a file to overwrite. Checking it first
			// also avoids reading a large checkpoint only to fail at the write.
			if out == "" {
				return fmt.Errorf("-o FILE is required")
			}
			// Refuse a directory or an unwritable path before export.Run does any work.
			if err := checkOutputFile("-o", out); err != nil {
				return err
			}
			// export.Run checks --format and --step: which steps exist is known only once
			// it lists the folder's checkpoints.
			res, err := export.Run(args[0], export.Options{Format: format, Out: out, Step: step})
			if err != nil {
				return err
			}
			// Refused checkpoints (torn or corrupt) are not fatal: export falls back to an older
			// valid one, but the user should know which were passed over and why.
			for _, r := range res.Refused {
				fmt.Fprintf(cmd.ErrOrStderr(), "lcc: warning: skipped %s: %v\n", r.Path, r.Err)
			}
			w := cmd.OutOrStdout()
			// Skipped tensors go to stdout with the result, since they change what the file holds.
			for _, s := range res.Skipped {
				fmt.Fprintf(w, "skipped %s\n", s)
			}
			fmt.Fprintf(w, "wrote %s: %d tensors from %s (step %d)\n", out, res.Tensors, res.Checkpoint, res.Step)
			return nil
		},
	}
	// safetensors by default: the format a PyTorch user loads directly, and the
	// smaller of the two (the weights alone, no graph).
	cmd.Flags().StringVar(&format, "format", "safetensors", "safetensors (PyTorch state_dict names) or onnx")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write")
	// 0 is no checkpoint's step (the first is written after step 1), so it can stand
	// for the newest.
	cmd.Flags().IntVar(&step, "step", 0, "export the checkpoint of this step (default: the newest valid one)")
	return cmd
}
