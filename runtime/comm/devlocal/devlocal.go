// Package devlocal is a device communicator (runtime/comm.Device) whose N ranks
// share one GPU: each rank has its own stream and its own buffers, and the
// collectives are device-to-device copies and small reduction kernels between
// the ranks' buffers. It exists so that a multi-rank GPU program (ring attention,
// sharded dilated attention, the gradient all-reduce) can be tested, with the
// same executor and the same plan as on NCCL, on a machine with one GPU. It is a
// test and development mode: nothing overlaps across ranks that NCCL would run
// on separate GPUs, and NCCL itself refuses two ranks on one GPU.
//
// How a collective runs: every rank posts its buffers and an event recorded on
// its own stream (so its inputs are written and its outputs free), and waits on
// the host until every rank of the World has posted the same collective. Then
// each rank queues, on its own stream, a wait for every rank's event and the
// copies (or the reduction) that write its own outputs, pulling from the other
// ranks' inputs; it posts a second event after them and, once every rank has,
// waits for all of those, so no rank's stream passes the collective while
// another rank still reads its inputs. In-place reductions (send = recv) go
// through a scratch buffer. A rank's pulled event lives until every rank has
// queued its wait on it: until the next collective's drain, or in Close, until
// every rank has finished the last one (a rank that finishes its program first
// must not destroy the event a slower peer is about to wait on).
//
// Invariants:
//   - Results are exact and the same on every rank: reductions add the ranks'
//     parts in rank order, in fp32 for bf16 (rounded once) and in the dtype
//     otherwise, so a sum matches runtime/comm's in-process communicator bit for
//     bit on f32 and f64.
//   - Nothing waits forever: a rank missing from a collective fails the others
//     after the World's timeout with an error naming the op and the ranks that
//     did not arrive; a mismatch (different ops, counts or peers) is an error
//     naming both ranks.
//   - The host-level collective.Communicator is runtime/comm's in-process Endpoint.
package devlocal

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// World is N ranks on one GPU.
type World struct {
	n       int
	timeout time.Duration
	host    *comm.World
	cache   *cuda.Cache

	mu     sync.Mutex
	rounds map[uint64]*round
	done   chan struct{} // closed by Abort
	cause  error
	once   sync.Once
}

// NewWorld connects n ranks; timeout bounds every wait (comm.DefaultTimeout
// when 0); cache compiles the reduction kernels.
func NewWorld(n int, timeout time.Duration, cache *cuda.Cache) *World {
	if timeout <= 0 {
		timeout = comm.DefaultTimeout
	}
	return &World{n: n, timeout: timeout, host: comm.NewWorld(n, timeout), cache: cache,
		rounds: map[uint64]*round{}, done: make(chan struct{})}
}

// Abort fails every pending and later collective with cause.
func (w *World) Abort(cause error) {
	w.once.Do(func() {
		w.mu.Lock()
		w.cause = cause
		w.mu.Unlock()
		close(w.done)
		w.host.Abort(cause)
	})
}

// post is one rank's part of a collective.
type post struct {
	op, kind   string
	dt         tensor.DType
	red        cuda.ReduceOp
	send, recv cuda.DevicePtr
	count      int // all_reduce, all_gather, reduce_scatter: as comm.Device says
	sendCount  int // send_recv
	recvCount  int
	dst, src   int
	sendCounts []int // all_to_all
	sendOff    []int
	recvCounts []int
	recvOff    []int
	ev         *cuda.Event
}

// round is one collective: the posts, then the events after each rank's pulls.
type round struct {
	posts   []*post
	pulled  []*cuda.Event
	n1, n2  int
	all     chan struct{} // every rank posted
	drained chan struct{} // every rank posted its pulled event
	n3      int
	waited  chan struct{} // every rank queued its waits on the others' pulled events
}

// finish records that a rank is done with r: it queued (or gave up) its waits
// on the others' pulled events, so they may be destroyed once every rank is.
func (w *World) finish(r *round) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.n3++; r.n3 == w.n {
		close(r.waited)
	}
}

// meet registers rank's post for collective seq and waits for every rank's.
func (w *World) meet(seq uint64, rank int, p *post) (*round, error) {
	w.mu.Lock()
	r := w.rounds[seq]
	if r == nil {
		r = &round{posts: make([]*post, w.n), pulled: make([]*cuda.Event, w.n),
			all: make(chan struct{}), drained: make(chan struct{}), waited: make(chan struct{})}
		w.rounds[seq] = r
	}
	r.posts[rank] = p
	r.n1++
	if r.n1 == w.n {
		close(r.all)
	}
	w.mu.Unlock()
	if err := w.wait(r.all, rank, p.op, func() []*post {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.Clone(r.posts)
	}); err != nil {
		return nil, err
	}
	for s, q := range r.posts {
		if q.kind != p.kind || q.dt != p.dt || q.red != p.red {
			return nil, fmt.Errorf("devlocal: rank %d: %s (%s %v): rank %d is in %s (%s %v): the ranks "+
				"execute different programs", rank, p.op, p.kind, p.dt, s, q.op, q.kind, q.dt)
		}
	}
	return r, nil
}

// drain registers rank's pulled event and waits for every rank's; the last
// rank forgets the round.
func (w *World) drain(seq uint64, rank int, op string, ev *cuda.Event) (*round, error) {
	w.mu.Lock()
	r := w.rounds[seq]
	r.pulled[rank] = ev
	r.n2++
	if r.n2 == w.n {
		close(r.drained)
		delete(w.rounds, seq)
	}
	w.mu.Unlock()
	err := w.wait(r.drained, rank, op, func() []*post {
		w.mu.Lock()
		defer w.mu.Unlock()
		ps := make([]*post, w.n)
		for i, e := range r.pulled {
			if e != nil {
				ps[i] = &post{}
			}
		}
		return ps
	})
	return r, err
}

// wait blocks until ch closes, the World aborts or the timeout passes; the
// timeout's error names the ranks whose slot is still empty.
func (w *World) wait(ch chan struct{}, rank int, op string, slots func() []*post) error {
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return fmt.Errorf("%w: rank %d: %s: %v", comm.ErrAborted, rank, op, w.cause)
	case <-t.C:
		var missing []int
		for i, p := range slots() {
			if p == nil {
				missing = append(missing, i)
			}
		}
		err := fmt.Errorf("devlocal: rank %d: %s: timed out after %v waiting for rank(s) %v", rank, op,
			w.timeout, missing)
		w.Abort(err)
		return err
	}
}

// Comm is one rank of a World on its own stream. Use it from one goroutine.
type Comm struct {
	*comm.Endpoint
	w       *World
	dev     *cuda.Device
	stream  *cuda.Stream
	seq     uint64
	fns     map[string]*cuda.Function
	mods    []*cuda.Module
	scratch cuda.DevicePtr
	scrLen  int
	// last is the rank's last collective. Its pulled event (last.pulled[rank]),
	// which peers wait on, lives until the next collective's drain, or until
	// every rank has queued its waits on it (Close).
	last *round
}

var _ comm.Device = (*Comm)(nil)

// Comm returns rank's communicator on dev (a Device of the World's GPU; each
// rank may open its own).
func (w *World) Comm(dev *cuda.Device, rank int) (*Comm, error) {
	if rank < 0 || rank >= w.n {
		return nil, fmt.Errorf("devlocal: rank %d of %d", rank, w.n)
	}
	s, err := dev.NewStream()
	if err != nil {
		return nil, err
	}
	return &Comm{Endpoint: w.host.Endpoint(rank), w: w, dev: dev, stream: s, fns: map[string]*cuda.Function{}}, nil
}

// Stream is the rank's communication stream.
func (c *Comm) Stream() *cuda.Stream { return c.stream }

// After makes later collectives wait for e.
func (c *Comm) After(e *cuda.Event) error { return c.stream.Wait(e) }

// Done records an event after the collectives queued so far; the caller
// destroys it.
func (c *Comm) Done() (*cuda.Event, error) { return c.stream.Mark() }

// Sync waits for every collective queued on the rank's stream.
func (c *Comm) Sync() error { return c.stream.Synchronize() }

// Close waits for the queued work and releases the stream, kernels and scratch.
func (c *Comm) Close() error {
	errs := []error{c.Sync()}
	if c.last != nil {
		// A peer may be between the last collective's drain and its wait on
		// this event; destroying it first fails that wait (invalid handle).
		// Every rank that passed the drain finishes the round without waiting
		// on this one, so this wait is short and cannot deadlock.
		if err := c.w.wait(c.last.waited, c.Rank(), "close", func() []*post { return nil }); err != nil &&
			!errors.Is(err, comm.ErrAborted) {
			errs = append(errs, err)
		}
		errs = append(errs, c.last.pulled[c.Rank()].Destroy())
	}
	for _, m := range c.mods {
		errs = append(errs, m.Unload())
	}
	if c.scratch != 0 {
		errs = append(errs, c.dev.Free(c.scratch))
	}
	errs = append(errs, c.stream.Destroy())
	return errors.Join(errs...)
}

// run is one collective on this rank: post, meet, queue the pulls (pull), then
// drain. pull gets every rank's post, by rank.
func (c *Comm) run(p *post, pull func(ps []*post) error) error {
	c.seq++
	seq := c.seq
	me := c.Rank()
	var err error
	if p.ev, err = c.stream.Mark(); err != nil {
		return err
	}
	defer p.ev.Destroy() // released once the waits on it are satisfied
	r, err := c.w.meet(seq, me, p)
	if err != nil {
		return err
	}
	for s, q := range r.posts {
		if s != me {
			if err := c.stream.Wait(q.ev); err != nil {
				return err
			}
		}
	}
	perr := pull(r.posts)
	ev, err := c.stream.Mark()
	if err != nil {
		return errors.Join(perr, err)
	}
	if r, err = c.w.drain(seq, me, p.op, ev); err != nil {
		ev.Destroy()
		return errors.Join(perr, err)
	}
	defer c.w.finish(r)
	// Every rank has now finished the previous collective, waits on the
	// previous pulled event included, so it may go; this one's stays until
	// the next collective (or Close), since a peer may not have waited on it yet.
	if c.last != nil {
		c.last.pulled[me].Destroy()
	}
	c.last = r
	for s, e := range r.pulled {
		if s != me {
			if err := c.stream.Wait(e); err != nil {
				return err
			}
		}
	}
	if perr != nil {
		c.w.Abort(perr) // the others' results are incomplete too
	}
	return perr
}

// mismatch is the error of a collective whose ranks disagree.
func mismatch(op string, me, other int, what string, mine, theirs any) error {
	return fmt.Errorf("devlocal: rank %d: %s: rank %d has %s %v, rank %d %v", me, op, other, what, theirs, me,
		mine)
}

// AllGatherDevice copies every rank's count elements into recv, rank-major.
func (c *Comm) AllGatherDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType) error {
	es := dt.Size()
	return c.run(&post{op: op, kind: "all_gather", dt: dt, send: send, recv: recv, count: count},
		func(ps []*post) error {
			for s, q := range ps {
				if q.count != count {
					return mismatch(op, c.Rank(), s, "count", count, q.count)
				}
				if err := c.stream.CopyDtoDAsync(recv+cuda.DevicePtr(s*count*es), q.send, count*es); err != nil {
					return err
				}
			}
			return nil
		})
}

// SendRecvDevice copies rank src's send into recv (src sends to this rank).
func (c *Comm) SendRecvDevice(op string, send cuda.DevicePtr, sendCount, dst int, recv cuda.DevicePtr,
	recvCount, src int, dt tensor.DType) error {
	n, me := c.Size(), c.Rank()
	if dst < 0 || dst >= n || src < 0 || src >= n {
		return fmt.Errorf("devlocal: rank %d: %s: peer %d or %d out of range for %d ranks", me, op, dst, src, n)
	}
	return c.run(&post{op: op, kind: "send_recv", dt: dt, send: send, recv: recv, sendCount: sendCount,
		recvCount: recvCount, dst: dst, src: src}, func(ps []*post) error {
		q := ps[src]
		if q.dst != me {
			return fmt.Errorf("devlocal: rank %d: %s: receives from rank %d, which sends to rank %d", me, op,
				src, q.dst)
		}
		if q.sendCount != recvCount {
			return mismatch(op, me, src, "count", recvCount, q.sendCount)
		}
		return c.stream.CopyDtoDAsync(recv, q.send, recvCount*dt.Size())
	})
}

// AllToAllDevice copies the block every rank sends here into recv.
func (c *Comm) AllToAllDevice(op string, send cuda.DevicePtr, sendCounts, sendOff []int,
	recv cuda.DevicePtr, recvCounts, recvOff []int, dt tensor.DType) error {
	n, me, es := c.Size(), c.Rank(), dt.Size()
	for _, l := range [][]int{sendCounts, sendOff, recvCounts, recvOff} {
		if len(l) != n {
			return fmt.Errorf("devlocal: rank %d: %s: %d counts or offsets for %d ranks", me, op, len(l), n)
		}
	}
	return c.run(&post{op: op, kind: "all_to_all", dt: dt, send: send, recv: recv,
		sendCounts: slices.Clone(sendCounts), sendOff: slices.Clone(sendOff),
		recvCounts: slices.Clone(recvCounts), recvOff: slices.Clone(recvOff)}, func(ps []*post) error {
		for s, q := range ps {
			if q.sendCounts[me] != recvCounts[s] {
				return mismatch(op, me, s, "count", recvCounts[s], q.sendCounts[me])
			}
			if err := c.stream.CopyDtoDAsync(recv+cuda.DevicePtr(recvOff[s]*es),
				q.send+cuda.DevicePtr(q.sendOff[me]*es), recvCounts[s]*es); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllReduceDevice sums (or takes the max or min of) every rank's count
// elements into recv, in rank order.
func (c *Comm) AllReduceDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType,
	red cuda.ReduceOp) error {
	return c.reduce(&post{op: op, kind: "all_reduce", dt: dt, red: red, send: send, recv: recv,
		count: count}, 0)
}

// ReduceScatterDevice reduces block rank of every rank's send into recv.
func (c *Comm) ReduceScatterDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType,
	red cuda.ReduceOp) error {
	return c.reduce(&post{op: op, kind: "reduce_scatter", dt: dt, red: red, send: send, recv: recv,
		count: count}, c.Rank()*count)
}

// reduce runs the reduction kernel over every rank's send (from element off)
// into recv, through the scratch buffer when any rank reduces in place.
func (c *Comm) reduce(p *post, off int) error {
	me, es := c.Rank(), p.dt.Size()
	fn, err := c.reducer(p.dt, p.red)
	if err != nil {
		return err
	}
	// Every rank runs the same program, so all reduce in place or none does.
	inPlace := p.send == p.recv
	if inPlace && p.count*es > c.scrLen {
		if err := c.grow(p.count * es); err != nil {
			return err
		}
	}
	err = c.run(p, func(ps []*post) error {
		args := []any{}
		for s, q := range ps {
			if q.count != p.count {
				return mismatch(p.op, me, s, "count", p.count, q.count)
			}
			if (q.send == q.recv) != inPlace {
				return fmt.Errorf("devlocal: rank %d: %s: rank %d reduces in place, rank %d not (or the "+
					"reverse)", me, p.op, s, me)
			}
		}
		out := p.recv
		if inPlace {
			out = c.scratch
		}
		args = append(args, out)
		for _, q := range ps {
			args = append(args, q.send+cuda.DevicePtr(off*es))
		}
		args = append(args, int64(p.count))
		if p.count == 0 {
			return nil
		}
		return fn.Launch([3]uint32{uint32((p.count + 255) / 256), 1, 1}, [3]uint32{256, 1, 1}, 0, c.stream,
			args...)
	})
	if err != nil || !inPlace || p.count == 0 {
		return err
	}
	// Every rank has read every input (the drain), so the result may land now.
	return c.stream.CopyDtoDAsync(p.recv, c.scratch, p.count*es)
}

// grow makes the scratch buffer at least bytes long (after queued work).
func (c *Comm) grow(bytes int) error {
	if c.scratch != 0 {
		if err := c.Sync(); err != nil {
			return err
		}
		if err := c.dev.Free(c.scratch); err != nil {
			return err
		}
		c.scratch, c.scrLen = 0, 0
	}
	p, err := c.dev.Alloc(bytes)
	if err != nil {
		return err
	}
	c.scratch, c.scrLen = p, bytes
	return nil
}

// reducer loads (compiling through the World's cache) the reduction kernel of
// dt and red for the World's ranks.
func (c *Comm) reducer(dt tensor.DType, red cuda.ReduceOp) (*cuda.Function, error) {
	k, err := ReduceKernel(dt, red, c.Size())
	if err != nil {
		return nil, err
	}
	if fn := c.fns[k.Name]; fn != nil {
		return fn, nil
	}
	if c.w.cache == nil {
		return nil, errors.New("devlocal: the World has no kernel cache")
	}
	img, err := c.w.cache.Get(k.Source, k.Name+".cu", c.dev.Arch(), nil)
	if err != nil {
		return nil, err
	}
	m, err := c.dev.LoadModule(img)
	if err != nil {
		return nil, err
	}
	c.mods = append(c.mods, m)
	fn, err := m.Function(k.Name)
	if err != nil {
		return nil, err
	}
	c.fns[k.Name] = fn
	return fn, nil
}
