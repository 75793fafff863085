package ir

// %y = stop_gradient(%x) : f32[...]
//
// The identity on values whose gradient is zero (JAX's lax.stop_gradient, GoMLX's
// StopGradient): the importer uses it where PyTorch's own backward drops a
// gradient the forward does not show, such as nn.Embedding's padding_idx row.
// It is elementwise, so codegen fuses it into its neighbours as "$0".
func init() {
	def(OpStopGradient, OpInfo{Name: "stop_gradient", MinArgs: 1, MaxArgs: 1, Infer: inferFloatUnary,
		NoGrad: true, Elementwise: true})
}
