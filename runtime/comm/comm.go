// Package comm is lcc's in-process communicator: N ranks of one SPMD program run
// as goroutines of one process and exchange tensors over channels, so that the
// CPU interpreter can execute a sequence-sharded program exactly as N GPUs would
// run it with NCCL (docs/design.md §3, §8).
//
// A World connects N Endpoints, one per rank. Every collective is built from
// point-to-point messages on a buffered channel per ordered pair of ranks. Each
// message carries the name of the node that sent it, a per-endpoint sequence
// number and, where the collective requires it, the tensor's shape, so that the
// receiver detects a mismatch (ranks executing different collectives, or the same
// one with different shapes) and returns an error naming the op and both ranks.
//
// Invariants:
//   - Nothing blocks forever: every send and receive waits at most the World's
//     timeout, then fails with an error naming the op, the rank waiting and the
//     rank it waited for. Abort wakes every waiting rank at once.
//   - Results are identical on every rank and independent of scheduling:
//     reductions add the ranks' contributions in rank order.
//   - Payloads are []float64 and never shared: senders pass a copy.
package comm

import (
	"github.com/lcc-dev/lcc/collective"

	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Endpoint is the in-process transport of collective.Communicator, the one
// interface every transport implements.
var _ collective.Communicator = (*Endpoint)(nil)

// DefaultTimeout bounds each wait of a collective when NewWorld gets 0.
const DefaultTimeout = 30 * time.Second

// message is one point-to-point transfer.
type message struct {
	op    string
	seq   uint64
	shape []int64 // nil when the collective allows any size
	data  []float64
}

// World is N ranks that can talk to each other.
type World struct {
	n       int
	timeout time.Duration
	ch      [][]chan message // ch[src][dst]
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	cause   error
}

// NewWorld connects n ranks; timeout bounds every wait (DefaultTimeout when 0).
func NewWorld(n int, timeout time.Duration) *World {
	if n < 1 {
		panic(fmt.Sprintf("lcc: BUG: comm.NewWorld(%d)", n))
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	w := &World{n: n, timeout: timeout, done: make(chan struct{})}
	w.ch = make([][]chan message, n)
	for s := range n {
		w.ch[s] = make([]chan message, n)
		for d := range n {
			// A rank runs at most a few collectives ahead of its peers; 64 slots
			// keep sends from ever blocking in a correct program.
			w.ch[s][d] = make(chan message, 64)
		}
	}
	return w
}

// Size is the number of ranks.
func (w *World) Size() int { return w.n }

// Endpoint returns rank r's endpoint. Each rank must use its own endpoint from one
// goroutine at a time.
func (w *World) Endpoint(r int) *Endpoint {
	if r < 0 || r >= w.n {
		panic(fmt.Sprintf("lcc: BUG: comm: rank %d of %d", r, w.n))
	}
	return &Endpoint{w: w, rank: r}
}

// Abort makes every pending and future collective fail at once, reporting err as
// the cause. The first call wins; later ones are ignored.
func (w *World) Abort(err error) {
	w.once.Do(func() {
		w.mu.Lock()
		w.cause = err
		w.mu.Unlock()
		close(w.done)
	})
}

// Cause returns the error passed to the first Abort, or nil.
func (w *World) Cause() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause
}

// ErrAborted is wrapped by the errors of collectives interrupted by Abort.
var ErrAborted = errors.New("comm: aborted")

// Endpoint is one rank's handle on a World.
type Endpoint struct {
	w    *World
	rank int
	seq  uint64
}

// Rank is this endpoint's rank.
func (e *Endpoint) Rank() int { return e.rank }

// Size is the number of ranks.
func (e *Endpoint) Size() int { return e.w.n }

func (e *Endpoint) send(op string, dst int, m message) error {
	t := time.NewTimer(e.w.timeout)
	defer t.Stop()
	select {
	case e.w.ch[e.rank][dst] <- m:
		return nil
	case <-e.w.done:
		return fmt.Errorf("%w: rank %d: %s: %v", ErrAborted, e.rank, op, e.w.Cause())
	case <-t.C:
		return fmt.Errorf("comm: rank %d: %s: timed out after %v sending to rank %d", e.rank, op,
			e.w.timeout, dst)
	}
}

func (e *Endpoint) recv(op string, src int, shape []int64) ([]float64, error) {
	t := time.NewTimer(e.w.timeout)
	defer t.Stop()
	select {
	case m := <-e.w.ch[src][e.rank]:
		if m.op != op || m.seq != e.seq {
			return nil, fmt.Errorf("comm: rank %d: %s (collective #%d): rank %d is in %s (collective #%d) "+
				"instead: the ranks execute different programs", e.rank, op, e.seq, src, m.op, m.seq)
		}
		if shape != nil && m.shape != nil && !slices.Equal(shape, m.shape) {
			return nil, fmt.Errorf("comm: rank %d: %s: rank %d sent shape %v, rank %d has %v",
				e.rank, op, src, m.shape, e.rank, shape)
		}
		return m.data, nil
	case <-e.w.done:
		return nil, fmt.Errorf("%w: rank %d: %s: %v", ErrAborted, e.rank, op, e.w.Cause())
	case <-t.C:
		return nil, fmt.Errorf("comm: rank %d: %s: timed out after %v waiting for rank %d "+
			"(a rank is missing or runs a different program)", e.rank, op, e.w.timeout, src)
	}
}

// exchange sends parts[d] to every rank d and returns what every rank sent here
// (this rank's own part is returned without a transfer). shape, when not nil,
// must be equal on every rank.
func (e *Endpoint) exchange(op string, shape []int64, parts [][]float64) ([][]float64, error) {
	e.seq++
	n := e.w.n
	if len(parts) != n {
		return nil, fmt.Errorf("comm: rank %d: %s: %d parts for %d ranks", e.rank, op, len(parts), n)
	}
	for k := 1; k < n; k++ {
		d := (e.rank + k) % n
		m := message{op: op, seq: e.seq, shape: shape, data: slices.Clone(parts[d])}
		if err := e.send(op, d, m); err != nil {
			return nil, err
		}
	}
	out := make([][]float64, n)
	out[e.rank] = slices.Clone(parts[e.rank])
	for k := 1; k < n; k++ {
		s := (e.rank - k + n) % n
		x, err := e.recv(op, s, shape)
		if err != nil {
			return nil, err
		}
		out[s] = x
	}
	return out, nil
}

// AllGather returns every rank's x, indexed by rank. With shape not nil every rank
// must pass the same shape; with nil the sizes may differ.
func (e *Endpoint) AllGather(op string, shape []int64, x []float64) ([][]float64, error) {
	parts := make([][]float64, e.w.n)
	for i := range parts {
		parts[i] = x
	}
	return e.exchange(op, shape, parts)
}

// AllToAll sends parts[d] to rank d and returns the parts every rank sent to
// this one, indexed by source rank.
func (e *Endpoint) AllToAll(op string, parts [][]float64) ([][]float64, error) {
	return e.exchange(op, nil, parts)
}

// SendRecv sends x to rank dst and returns what rank src sent to this rank in the
// same collective (a ring step when dst = rank+1 and src = rank−1).
func (e *Endpoint) SendRecv(op string, x []float64, dst, src int) ([]float64, error) {
	e.seq++
	n := e.w.n
	if dst < 0 || dst >= n || src < 0 || src >= n {
		return nil, fmt.Errorf("comm: rank %d: %s: peer %d or %d out of range for %d ranks",
			e.rank, op, dst, src, n)
	}
	if dst == e.rank && src == e.rank {
		return slices.Clone(x), nil
	}
	if err := e.send(op, dst, message{op: op, seq: e.seq, data: slices.Clone(x)}); err != nil {
		return nil, err
	}
	return e.recv(op, src, nil)
}

// AllReduce returns the elementwise reduction ("sum", "max" or "min") of every
// rank's x, added in rank order so that every rank gets the same bits.
func (e *Endpoint) AllReduce(op string, shape []int64, x []float64, reduce string) ([]float64, error) {
	all, err := e.AllGather(op, shape, x)
	if err != nil {
		return nil, err
	}
	return Reduce(op, e.rank, all, reduce)
}

// ReduceScatter reduces the blocks every rank sent this rank, in rank order.
func (e *Endpoint) ReduceScatter(op string, parts [][]float64, reduce string) ([]float64, error) {
	got, err := e.AllToAll(op, parts)
	if err != nil {
		return nil, err
	}
	return Reduce(op, e.rank, got, reduce)
}

// Reduce combines every rank's part elementwise with reduce ("sum", "max" or
// "min"), in rank order, so that every implementation of AllReduce that reduces
// gathered parts with it gives the same bits on every rank. rank names the caller
// in errors.
func Reduce(op string, rank int, parts [][]float64, reduce string) ([]float64, error) {
	out := slices.Clone(parts[0])
	for s, y := range parts[1:] {
		if len(y) != len(out) {
			return nil, fmt.Errorf("comm: rank %d: %s: rank %d sent %d elements, rank 0 %d", rank, op,
				s+1, len(y), len(out))
		}
		for i, v := range y {
			switch reduce {
			case "sum":
				out[i] += v
			case "max":
				out[i] = max(out[i], v)
			case "min":
				out[i] = min(out[i], v)
			default:
				return nil, fmt.Errorf("comm: %s: unknown reduction %q", op, reduce)
			}
		}
	}
	return out, nil
}

// Run starts fn once per rank, each on its own goroutine with its own endpoint,
// and waits for all. When a rank fails the World is aborted so the others stop
// promptly; the error returned is the first failure (the cause), not the aborts it
// triggered.
func (w *World) Run(fn func(e *Endpoint) error) error {
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	for r := range w.n {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
					w.Abort(errs[r])
				}
			}()
			if err := fn(w.Endpoint(r)); err != nil {
				errs[r] = err
				w.Abort(err)
			}
		})
	}
	wg.Wait()
	if c := w.Cause(); c != nil {
		return c
	}
	return nil
}
