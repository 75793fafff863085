package main

import (
	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/passes"
)

// ropeFlags are --rope-theta and --rope-scaling, which compile, check, run,
// train and eval take alike: the rescale-rope pass's configuration.
type ropeFlags struct {
	// theta 0 and scaling "none" leave the model's embeddings as exported.
	theta   float64
	scaling string
}

// add registers the two flags.
func (r *ropeFlags) add(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&r.theta, "rope-theta", 0,
		"give the rotary position embeddings this base (rope_theta; 0 keeps the model's)")
	cmd.Flags().StringVar(&r.scaling, "rope-scaling", "none",
		"rescale the rotary embeddings as Hugging Face's rope_scaling: none, "+passes.RoPEScalingKinds+
			" (L: the pretraining length; default the sequence length / F)")
}

// config validates the flags into the pass's configuration. The errors name the
// flag and its value (passes words them), so each command returns them as they are.
func (r *ropeFlags) config() (passes.RoPEConfig, error) {
	s, err := passes.ParseRoPEScaling(r.scaling)
	if err != nil {
		return passes.RoPEConfig{}, err
	}
	// Validate here so a bad combination is a flag error, not a failure inside the pass.
	c := passes.RoPEConfig{Theta: r.theta, Scaling: s}
	return c, c.Validate()
}
