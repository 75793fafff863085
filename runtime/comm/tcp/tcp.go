// Package tcp is lcc's communicator between processes on the CPU: the ranks of a
// multi-process run (one process per rank, runtime/comm/rendezvous) connect in a
// full mesh of TCP connections and run the collectives of
// collective.Communicator over them. It is what NCCL is on GPUs, so that the
// multi-process runner is testable without GPUs.
//
// The collectives are built exactly as the in-process communicator builds them
// (point-to-point messages; reductions of the gathered parts in rank order with
// comm.Reduce), so a program gets the same bits from both.
//
// Invariants (no rank ever hangs):
//   - Each peer connection has a reader goroutine that queues the peer's frames,
//     so sends never wait for the receiver to call recv.
//   - A peer whose connection closes without its goodbye frame (the process died,
//     was killed, or lost the network) fails every pending and later collective at
//     once, with an error naming that rank.
//   - A peer that aborts sends its reason first; the others fail with it.
//   - A silent peer is caught by the watchdog: every wait and every write is
//     bounded by the timeout, and then fails naming the rank waited for.
//
// Frames (little-endian): u8 kind, u64 seq, u16 len + op name, i32 rank of the
// shape (−1: none) + i64 dims, u64 count + float64 payload. Kinds: data, bye
// (the rank finished cleanly), abort (u16 len + reason in the op field).
package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/lcc-dev/lcc/collective"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/comm/rendezvous"
)

const (
	kindData  = 1
	kindBye   = 2
	kindAbort = 3
)

// maxOp bounds an op name or abort reason; maxElems a payload (2^31 float64s).
const (
	maxOp    = 1 << 15
	maxElems = 1 << 31
)

// frame is one message between two ranks.
type frame struct {
	kind  byte
	seq   uint64
	op    string
	shape []int64 // nil when the collective allows any size
	data  []float64
}

// peer is the connection to one other rank.
type peer struct {
	rank int
	conn net.Conn
	wmu  sync.Mutex
	w    *bufio.Writer
	in   chan frame
	// gone is closed when the reader stops; why says why (nil after a goodbye).
	gone chan struct{}
	why  error
}

// Comm is one rank's end of the mesh. Use it from one goroutine at a time
// (Abort may be called from any).
type Comm struct {
	rank, size int
	timeout    time.Duration
	peers      []*peer // nil at this rank
	seq        uint64
	done       chan struct{}
	once       sync.Once
	mu         sync.Mutex
	cause      error
	closed     bool
}

var _ collective.Communicator = (*Comm)(nil)

// Config says how to build the mesh.
type Config struct {
	rendezvous.Config
	// Timeout is the watchdog of every collective wait and write; Config.Timeout
	// (the rendezvous's) bounds the connection phase.
	Watchdog time.Duration
}

const hello = "lcctcp01"

// Connect meets the other ranks through the rendezvous at cfg.Addr and connects
// to every one of them. Each rank listens on an ephemeral port (on loopback when
// MASTER_ADDR is a loopback address) and sends its port as its card; rank j
// dials every rank i < j and introduces itself with the run's token.
func Connect(cfg Config) (*Comm, error) {
	if cfg.Watchdog <= 0 {
		return nil, errors.New("tcp: no watchdog timeout")
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: %q: %w", cfg.Addr, err)
	}
	bind := ":0"
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		bind = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d cannot listen: %w", cfg.Rank, err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	rv, err := rendezvous.Exchange(cfg.Config, []byte(port))
	if err != nil {
		return nil, err
	}
	c := &Comm{rank: cfg.Rank, size: cfg.Size, timeout: cfg.Watchdog, peers: make([]*peer, cfg.Size),
		done: make(chan struct{})}
	deadline := time.Now().Add(cfg.Timeout)
	fail := func(err error) (*Comm, error) {
		for _, p := range c.peers {
			if p != nil {
				p.conn.Close()
			}
		}
		return nil, err
	}
	// Dial the lower ranks.
	for r := range cfg.Rank {
		addr := net.JoinHostPort(rv.Peers[r].Host, string(rv.Peers[r].Card))
		conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
		if err != nil {
			return fail(fmt.Errorf("tcp: rank %d cannot connect to rank %d at %s: %w", cfg.Rank, r, addr, err))
		}
		var b bytes.Buffer
		b.WriteString(hello)
		b.Write(rv.Token[:])
		binary.Write(&b, binary.LittleEndian, uint32(cfg.Rank))
		conn.SetDeadline(deadline)
		if _, err := conn.Write(b.Bytes()); err != nil {
			conn.Close()
			return fail(fmt.Errorf("tcp: rank %d: introducing itself to rank %d: %w", cfg.Rank, r, err))
		}
		c.peers[r] = newPeer(r, conn)
	}
	// Accept the higher ranks.
	ln.(*net.TCPListener).SetDeadline(deadline)
	for n := cfg.Size - 1 - cfg.Rank; n > 0; {
		conn, err := ln.Accept()
		if err != nil {
			return fail(fmt.Errorf("tcp: rank %d: waiting for ranks above it to connect: %w", cfg.Rank, err))
		}
		conn.SetDeadline(deadline)
		var intro [len(hello) + 16 + 4]byte
		if _, err := io.ReadFull(conn, intro[:]); err != nil || string(intro[:len(hello)]) != hello ||
			!bytes.Equal(intro[len(hello):len(hello)+16], rv.Token[:]) {
			conn.Close() // not a rank of this run
			continue
		}
		r := int(binary.LittleEndian.Uint32(intro[len(hello)+16:]))
		if r <= cfg.Rank || r >= cfg.Size || c.peers[r] != nil {
			conn.Close()
			return fail(fmt.Errorf("tcp: rank %d: unexpected connection from rank %d", cfg.Rank, r))
		}
		c.peers[r] = newPeer(r, conn)
		n--
	}
	for _, p := range c.peers {
		if p != nil {
			p.conn.SetDeadline(time.Time{})
			if tc, ok := p.conn.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			go c.read(p)
		}
	}
	return c, nil
}

func newPeer(r int, conn net.Conn) *peer {
	return &peer{rank: r, conn: conn, w: bufio.NewWriterSize(conn, 1<<16), in: make(chan frame, 64),
		gone: make(chan struct{})}
}

// Rank is this process's rank.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Cause returns why the communicator was aborted, or nil.
func (c *Comm) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// abort fails every pending and later collective with err (the first cause wins).
func (c *Comm) abort(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.cause = err
		c.mu.Unlock()
		close(c.done)
	})
}

// read queues p's frames until its connection ends.
func (c *Comm) read(p *peer) {
	defer close(p.gone)
	r := bufio.NewReaderSize(p.conn, 1<<16)
	for {
		f, err := readFrame(r)
		if err != nil {
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return // our own Close or Abort
			}
			p.why = fmt.Errorf("the connection to rank %d broke without its goodbye (%v): "+
				"rank %d died, was killed or lost the network", p.rank, err, p.rank)
			c.abort(p.why)
			return
		}
		switch f.kind {
		case kindBye:
			p.why = fmt.Errorf("rank %d has finished and left", p.rank)
			return
		case kindAbort:
			p.why = fmt.Errorf("rank %d failed: %s", p.rank, f.op)
			c.abort(p.why)
			return
		}
		select {
		case p.in <- f:
		case <-c.done:
			return
		}
	}
}

// send writes one data frame to rank dst, bounded by the watchdog.
func (c *Comm) send(op string, dst int, f frame) error {
	select {
	case <-c.done:
		return c.aborted(op)
	default:
	}
	p := c.peers[dst]
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(c.timeout))
	if err := writeFrame(p.w, f); err != nil {
		if c.Cause() != nil {
			return c.aborted(op)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("rank %d: %s: rank %d took no data for %v (watchdog): rank %d hangs or is "+
				"stuck", c.rank, op, dst, c.timeout, dst)
		} else {
			err = fmt.Errorf("rank %d: %s: sending to rank %d: %v: rank %d died or closed its connection",
				c.rank, op, dst, err, dst)
		}
		c.abort(err)
		return err
	}
	return nil
}

func (c *Comm) aborted(op string) error {
	return fmt.Errorf("%w: rank %d: %s: %v", comm.ErrAborted, c.rank, op, c.Cause())
}

// recv waits for rank src's frame of this collective, bounded by the watchdog.
func (c *Comm) recv(op string, src int, shape []int64) ([]float64, error) {
	p := c.peers[src]
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case f := <-p.in:
		return c.accept(op, src, shape, f)
	case <-p.gone:
		select { // frames queued before a goodbye are still ours
		case f := <-p.in:
			return c.accept(op, src, shape, f)
		default:
		}
		if p.why == nil {
			return nil, c.aborted(op)
		}
		return nil, fmt.Errorf("rank %d: %s: %w", c.rank, op, p.why)
	case <-c.done:
		return nil, c.aborted(op)
	case <-t.C:
		err := fmt.Errorf("rank %d: %s: no data from rank %d for %v (watchdog): rank %d hangs, is "+
			"stuck or runs a different program", c.rank, op, src, c.timeout, src)
		c.abort(err)
		return nil, err
	}
}

// accept checks that f is src's part of this collective.
func (c *Comm) accept(op string, src int, shape []int64, f frame) ([]float64, error) {
	if f.op != op || f.seq != c.seq {
		err := fmt.Errorf("rank %d: %s (collective #%d): rank %d is in %s (collective #%d) instead: "+
			"the ranks execute different programs", c.rank, op, c.seq, src, f.op, f.seq)
		c.abort(err)
		return nil, err
	}
	if shape != nil && f.shape != nil && !slices.Equal(shape, f.shape) {
		err := fmt.Errorf("rank %d: %s: rank %d sent shape %v, rank %d has %v", c.rank, op, src,
			f.shape, c.rank, shape)
		c.abort(err)
		return nil, err
	}
	return f.data, nil
}

// exchange sends parts[d] to every rank d and returns what every rank sent here.
func (c *Comm) exchange(op string, shape []int64, parts [][]float64) ([][]float64, error) {
	c.seq++
	if len(parts) != c.size {
		return nil, fmt.Errorf("tcp: rank %d: %s: %d parts for %d ranks", c.rank, op, len(parts), c.size)
	}
	for k := 1; k < c.size; k++ {
		d := (c.rank + k) % c.size
		if err := c.send(op, d, frame{kind: kindData, seq: c.seq, op: op, shape: shape,
			data: parts[d]}); err != nil {
			return nil, err
		}
	}
	out := make([][]float64, c.size)
	out[c.rank] = slices.Clone(parts[c.rank])
	for k := 1; k < c.size; k++ {
		s := (c.rank - k + c.size) % c.size
		x, err := c.recv(op, s, shape)
		if err != nil {
			return nil, err
		}
		out[s] = x
	}
	return out, nil
}

// AllGather returns every rank's x, indexed by rank.
func (c *Comm) AllGather(op string, shape []int64, x []float64) ([][]float64, error) {
	parts := make([][]float64, c.size)
	for i := range parts {
		parts[i] = x
	}
	return c.exchange(op, shape, parts)
}

// AllToAll sends parts[d] to rank d and returns what each rank sent here.
func (c *Comm) AllToAll(op string, parts [][]float64) ([][]float64, error) {
	return c.exchange(op, nil, parts)
}

// SendRecv sends x to rank dst and returns what rank src sent here.
func (c *Comm) SendRecv(op string, x []float64, dst, src int) ([]float64, error) {
	c.seq++
	if dst < 0 || dst >= c.size || src < 0 || src >= c.size {
		return nil, fmt.Errorf("tcp: rank %d: %s: peer %d or %d out of range for %d ranks", c.rank, op,
			dst, src, c.size)
	}
	if dst == c.rank && src == c.rank {
		return slices.Clone(x), nil
	}
	if dst != c.rank {
		if err := c.send(op, dst, frame{kind: kindData, seq: c.seq, op: op, data: x}); err != nil {
			return nil, err
		}
	}
	if src == c.rank {
		return slices.Clone(x), nil
	}
	return c.recv(op, src, nil)
}

// AllReduce reduces every rank's x in rank order (comm.Reduce).
func (c *Comm) AllReduce(op string, shape []int64, x []float64, reduce string) ([]float64, error) {
	all, err := c.AllGather(op, shape, x)
	if err != nil {
		return nil, err
	}
	return comm.Reduce(op, c.rank, all, reduce)
}

// ReduceScatter reduces the blocks every rank sent this rank, in rank order.
func (c *Comm) ReduceScatter(op string, parts [][]float64, reduce string) ([]float64, error) {
	got, err := c.AllToAll(op, parts)
	if err != nil {
		return nil, err
	}
	return comm.Reduce(op, c.rank, got, reduce)
}

// Abort tells every peer that this rank failed, with err as the reason, and
// closes the connections; pending and later collectives fail.
func (c *Comm) Abort(err error) {
	c.abort(err)
	c.shutdown(frame{kind: kindAbort, op: truncate(err.Error())})
}

// Close says goodbye to every peer and closes the connections. A peer still
// waiting on this rank then fails at once, naming it.
func (c *Comm) Close() error {
	c.shutdown(frame{kind: kindBye})
	c.abort(errors.New("closed"))
	return nil
}

// shutdown sends f to every peer (briefly bounded), then closes.
func (c *Comm) shutdown(f frame) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range c.peers {
		if p == nil {
			continue
		}
		wg.Go(func() {
			p.wmu.Lock()
			p.conn.SetWriteDeadline(time.Now().Add(time.Second))
			writeFrame(p.w, f)
			p.wmu.Unlock()
			// Half-close, then wait briefly for the peer's end, so that the
			// goodbye is read before the connection resets.
			if tc, ok := p.conn.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			select {
			case <-p.gone:
			case <-time.After(time.Second):
			}
			p.conn.Close()
		})
	}
	wg.Wait()
}

func truncate(s string) string {
	if len(s) > maxOp-1 {
		return s[:maxOp-1]
	}
	return s
}

func writeFrame(w *bufio.Writer, f frame) error {
	var b [8]byte
	w.WriteByte(f.kind)
	binary.LittleEndian.PutUint64(b[:], f.seq)
	w.Write(b[:8])
	op := truncate(f.op)
	binary.LittleEndian.PutUint16(b[:], uint16(len(op)))
	w.Write(b[:2])
	w.WriteString(op)
	n := int32(-1)
	if f.shape != nil {
		n = int32(len(f.shape))
	}
	binary.LittleEndian.PutUint32(b[:], uint32(n))
	w.Write(b[:4])
	for _, d := range f.shape {
		binary.LittleEndian.PutUint64(b[:], uint64(d))
		w.Write(b[:8])
	}
	binary.LittleEndian.PutUint64(b[:], uint64(len(f.data)))
	w.Write(b[:8])
	for _, v := range f.data {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		w.Write(b[:8])
	}
	return w.Flush()
}

func readFrame(r *bufio.Reader) (frame, error) {
	var f frame
	var b [8]byte
	k, err := r.ReadByte()
	if err != nil {
		return f, err
	}
	f.kind = k
	if _, err := io.ReadFull(r, b[:8]); err != nil {
		return f, err
	}
	f.seq = binary.LittleEndian.Uint64(b[:])
	if _, err := io.ReadFull(r, b[:2]); err != nil {
		return f, err
	}
	op := make([]byte, binary.LittleEndian.Uint16(b[:]))
	if _, err := io.ReadFull(r, op); err != nil {
		return f, err
	}
	f.op = string(op)
	if _, err := io.ReadFull(r, b[:4]); err != nil {
		return f, err
	}
	if n := int32(binary.LittleEndian.Uint32(b[:])); n >= 0 {
		if n > 64 {
			return f, fmt.Errorf("a shape of rank %d", n)
		}
		f.shape = make([]int64, n)
		for i := range f.shape {
			if _, err := io.ReadFull(r, b[:8]); err != nil {
				return f, err
			}
			f.shape[i] = int64(binary.LittleEndian.Uint64(b[:]))
		}
	}
	if _, err := io.ReadFull(r, b[:8]); err != nil {
		return f, err
	}
	n := binary.LittleEndian.Uint64(b[:])
	if n > maxElems {
		return f, fmt.Errorf("a payload of %d elements", n)
	}
	if k != kindData && k != kindBye && k != kindAbort {
		return f, fmt.Errorf("a frame of kind %d", k)
	}
	f.data = make([]float64, n)
	for i := range f.data {
		if _, err := io.ReadFull(r, b[:8]); err != nil {
			return f, err
		}
		f.data[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	}
	return f, nil
}
