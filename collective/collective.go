// Package collective holds the one interface through which the ranks of an SPMD
// program exchange host values: the interpreter's collective kernels (interp) call
// it, and every transport implements it (runtime/comm's in-process Endpoint,
// runtime/comm/tcp between processes, runtime/comm/nccl through host copies).
// It sits at the bottom of the layering so that the interpreter, below the
// compiler, and the transports, above it, name the same contract.
package collective

// Communicator is one rank's view of its world. Every rank issues the same
// collectives in the same order; op names the calling node in errors, and an
// implementation turns a mismatch or a missing rank into an error. Results are
// identical on every rank and across transports: reductions combine the ranks'
// parts in rank order.
type Communicator interface {
	Rank() int
	Size() int
	// AllGather returns every rank's x by rank; a non-nil shape must agree on all ranks.
	AllGather(op string, shape []int64, x []float64) ([][]float64, error)
	// AllToAll sends parts[d] to rank d and returns what each rank sent here.
	AllToAll(op string, parts [][]float64) ([][]float64, error)
	// SendRecv sends x to dst and returns what src sent to this rank.
	SendRecv(op string, x []float64, dst, src int) ([]float64, error)
	// AllReduce reduces every rank's x elementwise ("sum", "max", "min").
	AllReduce(op string, shape []int64, x []float64, reduce string) ([]float64, error)
	// ReduceScatter reduces, elementwise in rank order, the parts[rank] every rank
	// passes, and returns this rank's block (parts[d] is the caller's contribution
	// to rank d's block).
	ReduceScatter(op string, parts [][]float64, reduce string) ([]float64, error)
}
