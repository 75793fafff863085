// Package nccl is lcc's communicator on GPUs: one rank of an NCCL communicator
// (runtime/cuda's bindings) with its own stream, ordered against the compute
// stream by events, and a watchdog that turns a dead, failed or hung peer into
// an error instead of a hang (docs/design.md §6, §10).
//
// Two faces:
//   - Device level (AllReduceDevice, AllGatherDevice, ReduceScatterDevice,
//     SendRecvDevice, AllToAllDevice): queue a collective on device buffers on the
//     NCCL stream and return; After orders the stream behind a compute event and
//     Done gives the event a compute stream waits on, so communication overlaps
//     compute. Sync waits for everything queued.
//   - Host level: Comm implements collective.Communicator on float64 host
//     slices by staging them through device memory, so the CPU interpreter and
//     the conformance script (runtime/comm/commtest) run over NCCL unchanged.
//
// Faults: the watchdog (watchdog.go) polls NCCL's asynchronous error, the age of
// the oldest unfinished collective (Options.Timeout) and an optional Monitor,
// and aborts the communicator with ncclCommAbort on the first failure. NCCL
// cannot say which rank died; the multi-process runner keeps the rendezvous's
// TCP mesh (runtime/comm/tcp) open beside NCCL as the Monitor, so that the error
// names the rank whose connection broke.
//
// Determinism: NCCL's sums follow its ring or tree, not rank order, so with
// more than one rank an all-reduce or reduce-scatter sum may differ from the
// CPU communicators' in the last bits (max and min are exact). With one rank
// every collective is exact.
package nccl

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// Monitor reports why the run failed (a peer died, or failed and said why), or
// nil; runtime/comm/tcp's Comm is one.
type Monitor interface{ Cause() error }

// Options configure a communicator.
type Options struct {
	// Timeout is the watchdog: a collective not complete after it aborts the
	// communicator (DefaultTimeout when 0). It also bounds the NCCL init.
	Timeout time.Duration
	// Poll is how often the watchdog looks (DefaultPoll when 0).
	Poll time.Duration
	// Monitor, if set, names failed peers.
	Monitor Monitor
}

// Defaults of Options.
const (
	DefaultTimeout = 60 * time.Second
	DefaultPoll    = 2 * time.Millisecond
)

// Comm is one rank's NCCL communicator. Use it from one goroutine at a time.
type Comm struct {
	dev    *cuda.Device
	nc     *cuda.Comm
	stream *cuda.Stream
	wd     *watchdog
	seq    uint64
}

var _ comm.Device = (*Comm)(nil)

// New joins rank of size ranks of the NCCL communicator id (rank 0 makes it with
// cuda.NCCLGetUniqueID and sends it through runtime/comm/rendezvous) on dev.
// Joining waits for every rank, at most opts.Timeout.
func New(dev *cuda.Device, size, rank int, id cuda.NCCLUniqueID, opts Options) (*Comm, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	type joined struct {
		nc  *cuda.Comm
		err error
	}
	ch := make(chan joined, 1)
	go func() {
		nc, err := dev.NewComm(size, rank, id)
		ch <- joined{nc, err}
	}()
	var nc *cuda.Comm
	select {
	case j := <-ch:
		if j.err != nil {
			return nil, fmt.Errorf("nccl: rank %d of %d: %w", rank, size, j.err)
		}
		nc = j.nc
	case <-time.After(opts.Timeout):
		// The init goroutine stays blocked in NCCL; the caller exits with this error.
		return nil, fmt.Errorf("nccl: rank %d of %d: not every rank joined within %v", rank, size,
			opts.Timeout)
	}
	s, err := dev.NewStream()
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &Comm{dev: dev, nc: nc, stream: s}
	c.wd = newWatchdog(opts.Timeout, opts.Poll, opts.Monitor, nc.AsyncError, nc.Abort)
	return c, nil
}

// Rank is this rank.
func (c *Comm) Rank() int { return c.nc.Rank() }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.nc.Size() }

// Stream is the communicator's own stream.
func (c *Comm) Stream() *cuda.Stream { return c.stream }

// After makes later collectives wait for e (recorded on a compute stream once
// their inputs are written); the host does not block.
func (c *Comm) After(e *cuda.Event) error { return c.stream.Wait(e) }

// Done records a new event after the collectives queued so far, for a compute
// stream to Wait on before it reads their outputs; the caller destroys it.
func (c *Comm) Done() (*cuda.Event, error) { return c.stream.Mark() }

// Err returns why the communicator was aborted, or nil.
func (c *Comm) Err() error { return c.wd.err() }

// queue runs enqueue (NCCL calls on the stream) under the watchdog: a call that
// blocks (a peer that never connects) is freed by the watchdog's abort.
func (c *Comm) queue(op string, enqueue func() error) error {
	p, err := c.wd.begin(op)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	go func() { ch <- enqueue() }()
	select {
	case err = <-ch:
	case <-c.wd.dead:
		return c.wd.err()
	}
	if err != nil {
		err = fmt.Errorf("nccl: %s: %w", op, err)
		c.wd.fail(err)
		return err
	}
	ev, err := c.dev.NewEvent()
	if err == nil {
		err = ev.Record(c.stream)
	}
	if err != nil {
		c.wd.fail(fmt.Errorf("nccl: %s: %w", op, err))
		return c.wd.err()
	}
	c.wd.queued(p, ev.Done, func() { ev.Destroy() })
	return nil
}

// AllReduceDevice queues the elementwise reduction of count elements of send
// over the ranks into recv.
func (c *Comm) AllReduceDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType,
	red cuda.ReduceOp) error {
	return c.queue(op, func() error { return c.nc.AllReduce(send, recv, count, dt, red, c.stream) })
}

// AllGatherDevice queues the gather of count elements from every rank into recv,
// rank-major.
func (c *Comm) AllGatherDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType) error {
	return c.queue(op, func() error { return c.nc.AllGather(send, recv, count, dt, c.stream) })
}

// ReduceScatterDevice queues the reduction of size·count elements of send over
// the ranks, leaving block rank (count elements) in recv.
func (c *Comm) ReduceScatterDevice(op string, send, recv cuda.DevicePtr, count int, dt tensor.DType,
	red cuda.ReduceOp) error {
	return c.queue(op, func() error { return c.nc.ReduceScatter(send, recv, count, dt, red, c.stream) })
}

// SendRecvDevice queues one ring step: sendCount elements of send to rank dst
// and recvCount elements from rank src into recv, as one NCCL group.
func (c *Comm) SendRecvDevice(op string, send cuda.DevicePtr, sendCount, dst int, recv cuda.DevicePtr,
	recvCount, src int, dt tensor.DType) error {
	return c.queue(op, func() error {
		if err := cuda.NCCLGroupStart(); err != nil {
			return err
		}
		err := c.nc.Send(send, sendCount, dt, dst, c.stream)
		if err == nil {
			err = c.nc.Recv(recv, recvCount, dt, src, c.stream)
		}
		if e := cuda.NCCLGroupEnd(); err == nil {
			err = e
		}
		return err
	})
}

// AllToAllDevice queues an all-to-all: sendCounts[d] elements at sendOff[d] of
// send go to rank d, and recvCounts[s] elements from rank s land at recvOff[s]
// of recv (offsets in elements), as one NCCL group of sends and receives.
func (c *Comm) AllToAllDevice(op string, send cuda.DevicePtr, sendCounts, sendOff []int,
	recv cuda.DevicePtr, recvCounts, recvOff []int, dt tensor.DType) error {
	es := int(dt.Size())
	return c.queue(op, func() error {
		if err := cuda.NCCLGroupStart(); err != nil {
			return err
		}
		var err error
		for r := 0; r < c.Size() && err == nil; r++ {
			if sendCounts[r] > 0 {
				err = c.nc.Send(send+cuda.DevicePtr(sendOff[r]*es), sendCounts[r], dt, r, c.stream)
			}
			if err == nil && recvCounts[r] > 0 {
				err = c.nc.Recv(recv+cuda.DevicePtr(recvOff[r]*es), recvCounts[r], dt, r, c.stream)
			}
		}
		if e := cuda.NCCLGroupEnd(); err == nil {
			err = e
		}
		return err
	})
}

// Sync waits until every queued collective has completed, under the watchdog.
func (c *Comm) Sync() error { return c.wd.wait() }

// Abort ends the communicator (ncclCommAbort) with cause; later calls fail.
func (c *Comm) Abort(cause error) { c.wd.fail(cause) }

// Close waits for queued work (under the watchdog), then frees the communicator.
func (c *Comm) Close() error {
	err := c.Sync()
	c.wd.close()
	if c.wd.err() == nil {
		err = errors.Join(err, c.nc.Close())
	}
	return errors.Join(err, c.stream.Destroy())
}

// staging is device memory for host-level collectives, freed by release.
type staging struct {
	c    *Comm
	ptrs []cuda.DevicePtr
}

func (s *staging) alloc(elems int) (cuda.DevicePtr, error) {
	p, err := s.c.dev.Alloc(max(elems, 1) * 8)
	if err == nil {
		s.ptrs = append(s.ptrs, p)
	}
	return p, err
}

func (s *staging) release() {
	for _, p := range s.ptrs {
		s.c.dev.Free(p)
	}
}

// upload copies x to new device memory and waits for the copy, so that the NCCL
// stream (which does not synchronise with the default stream) reads it whole.
func (s *staging) upload(x []float64) (cuda.DevicePtr, error) {
	p, err := s.alloc(len(x))
	if err != nil {
		return 0, err
	}
	if err := cuda.CopyHtoD(s.c.dev, p, x); err != nil {
		return 0, err
	}
	return p, s.c.dev.Synchronize()
}

// download waits for the collectives, then copies n elements back.
func (s *staging) download(p cuda.DevicePtr, n int) ([]float64, error) {
	if err := s.c.Sync(); err != nil {
		return nil, err
	}
	out := make([]float64, n)
	return out, cuda.CopyDtoH(s.c.dev, out, p)
}

// opName makes a host-level op name unique per call, for the watchdog's errors.
func (c *Comm) opName(op string) string {
	c.seq++
	return fmt.Sprintf("%s (collective #%d)", op, c.seq)
}

// AllGather returns every rank's x by rank. With a nil shape the sizes may
// differ: the sizes are gathered first and the parts padded to the largest.
func (c *Comm) AllGather(op string, shape []int64, x []float64) ([][]float64, error) {
	n := c.Size()
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = len(x)
	}
	if shape == nil {
		got, err := c.gather(op+" sizes", []float64{float64(len(x))})
		if err != nil {
			return nil, err
		}
		for r := range sizes {
			sizes[r] = int(got[r])
		}
	}
	m := slices.Max(sizes)
	padded := make([]float64, m)
	copy(padded, x)
	flat, err := c.gather(op, padded)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, n)
	for r := range out {
		out[r] = flat[r*m : r*m+sizes[r]]
	}
	return out, nil
}

// gather all-gathers equal-sized x into one rank-major slice.
func (c *Comm) gather(op string, x []float64) ([]float64, error) {
	s := &staging{c: c}
	defer s.release()
	send, err := s.upload(x)
	if err != nil {
		return nil, err
	}
	recv, err := s.alloc(len(x) * c.Size())
	if err != nil {
		return nil, err
	}
	if err := c.AllGatherDevice(c.opName(op), send, recv, len(x), tensor.F64); err != nil {
		return nil, err
	}
	return s.download(recv, len(x)*c.Size())
}

// AllToAll sends parts[d] to rank d and returns what each rank sent here; the
// sizes are exchanged first.
func (c *Comm) AllToAll(op string, parts [][]float64) ([][]float64, error) {
	n := c.Size()
	if len(parts) != n {
		return nil, fmt.Errorf("nccl: rank %d: %s: %d parts for %d ranks", c.Rank(), op, len(parts), n)
	}
	mine := make([]float64, n)
	for d, p := range parts {
		mine[d] = float64(len(p))
	}
	all, err := c.gather(op+" sizes", mine) // all[s*n+d]: what s sends to d
	if err != nil {
		return nil, err
	}
	sendCounts, sendOff := make([]int, n), make([]int, n)
	recvCounts, recvOff := make([]int, n), make([]int, n)
	var flat []float64
	total := 0
	for r := range n {
		sendCounts[r], sendOff[r] = len(parts[r]), len(flat)
		flat = append(flat, parts[r]...)
		recvCounts[r], recvOff[r] = int(all[r*n+c.Rank()]), total
		total += recvCounts[r]
	}
	s := &staging{c: c}
	defer s.release()
	send, err := s.upload(flat)
	if err != nil {
		return nil, err
	}
	recv, err := s.alloc(total)
	if err != nil {
		return nil, err
	}
	if err := c.AllToAllDevice(c.opName(op), send, sendCounts, sendOff, recv, recvCounts, recvOff,
		tensor.F64); err != nil {
		return nil, err
	}
	got, err := s.download(recv, total)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, n)
	for r := range out {
		out[r] = got[recvOff[r] : recvOff[r]+recvCounts[r]]
	}
	return out, nil
}

// SendRecv sends x to dst and returns what src sent here; the size travels first.
func (c *Comm) SendRecv(op string, x []float64, dst, src int) ([]float64, error) {
	n := c.Size()
	if dst < 0 || dst >= n || src < 0 || src >= n {
		return nil, fmt.Errorf("nccl: rank %d: %s: peer %d or %d out of range for %d ranks", c.Rank(), op,
			dst, src, n)
	}
	s := &staging{c: c}
	defer s.release()
	size, err := s.upload([]float64{float64(len(x))})
	if err != nil {
		return nil, err
	}
	gotSize, err := s.alloc(1)
	if err != nil {
		return nil, err
	}
	if err := c.SendRecvDevice(c.opName(op+" size"), size, 1, dst, gotSize, 1, src, tensor.F64); err != nil {
		return nil, err
	}
	m, err := s.download(gotSize, 1)
	if err != nil {
		return nil, err
	}
	send, err := s.upload(x)
	if err != nil {
		return nil, err
	}
	recv, err := s.alloc(int(m[0]))
	if err != nil {
		return nil, err
	}
	if err := c.SendRecvDevice(c.opName(op), send, len(x), dst, recv, int(m[0]), src, tensor.F64); err != nil {
		return nil, err
	}
	return s.download(recv, int(m[0]))
}

// reduceOp maps a reduction name to NCCL's.
func reduceOp(op, red string) (cuda.ReduceOp, error) {
	switch red {
	case "sum":
		return cuda.Sum, nil
	case "max":
		return cuda.Max, nil
	case "min":
		return cuda.Min, nil
	}
	return 0, fmt.Errorf("nccl: %s: unknown reduction %q", op, red)
}

// AllReduce reduces every rank's x elementwise with NCCL's all-reduce.
func (c *Comm) AllReduce(op string, shape []int64, x []float64, reduce string) ([]float64, error) {
	red, err := reduceOp(op, reduce)
	if err != nil {
		return nil, err
	}
	s := &staging{c: c}
	defer s.release()
	send, err := s.upload(x)
	if err != nil {
		return nil, err
	}
	recv, err := s.alloc(len(x))
	if err != nil {
		return nil, err
	}
	if err := c.AllReduceDevice(c.opName(op), send, recv, len(x), tensor.F64, red); err != nil {
		return nil, err
	}
	return s.download(recv, len(x))
}

// ReduceScatter reduces every rank's parts with NCCL's reduce-scatter and
// returns this rank's block; the parts must have equal sizes.
func (c *Comm) ReduceScatter(op string, parts [][]float64, reduce string) ([]float64, error) {
	red, err := reduceOp(op, reduce)
	if err != nil {
		return nil, err
	}
	if len(parts) != c.Size() {
		return nil, fmt.Errorf("nccl: rank %d: %s: %d parts for %d ranks", c.Rank(), op, len(parts), c.Size())
	}
	m := len(parts[0])
	var flat []float64
	for d, p := range parts {
		if len(p) != m {
			return nil, fmt.Errorf("nccl: rank %d: %s: part %d has %d elements, part 0 %d", c.Rank(), op, d,
				len(p), m)
		}
		flat = append(flat, p...)
	}
	s := &staging{c: c}
	defer s.release()
	send, err := s.upload(flat)
	if err != nil {
		return nil, err
	}
	recv, err := s.alloc(m)
	if err != nil {
		return nil, err
	}
	if err := c.ReduceScatterDevice(c.opName(op), send, recv, m, tensor.F64, red); err != nil {
		return nil, err
	}
	return s.download(recv, m)
}
