package ir

// This file only installs the VJP rules of grad*.go into the op table. It must sort
// after ops.go: Go runs a package's init functions in file-name order, and ops.go's
// def replaces whole rows, so an init in grad.go would have its Grad fields wiped.
func init() {
	for op, rule := range gradRules {
		if opTable[op].Name == "" {
			panic("lcc: BUG: VJP rule for an op with no table row: " + op.String())
		}
		if opTable[op].NoGrad {
			panic("lcc: BUG: VJP rule for an op marked NoGrad: " + op.String())
		}
		opTable[op].Grad = rule
	}
}
