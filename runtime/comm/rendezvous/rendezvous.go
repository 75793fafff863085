// Package rendezvous lets the processes of one multi-rank run find each other,
// as torchrun's static rendezvous does: rank 0 listens on MASTER_ADDR:MASTER_PORT,
// every other rank connects to it and sends a card (an opaque blob: the address of
// its data listener for runtime/comm/tcp, nothing for NCCL), and rank 0 answers
// every rank with all the cards, each with the host rank 0 saw it connect from,
// and a random session token. On GPUs rank 0's card is the NCCL unique id.
//
// Rank 0's port is open to anyone who can reach it, so every connection is
// untrusted until its hello checks out. Invariants:
//   - Nothing waits forever: Exchange fails after Config.Timeout naming the ranks
//     that did not arrive (on rank 0) or the address it could not reach.
//   - Connections are served concurrently, each under its own hello deadline, so
//     silent or slow strangers delay no one.
//   - A hello that is malformed, from another world size, for a rank outside the
//     world, for a rank already taken, or without the shared secret's mac is
//     refused: the sender is told why when it speaks the protocol, rank 0 logs it
//     (Config.Log) and goes on waiting, and its timeout error lists what it
//     refused. A rank whose connection closes before the exchange ends frees its
//     place for a later hello.
//   - With a shared secret (Config.Secret, from LCC_COMM_SECRET), rank 0 and the
//     other ranks prove to each other that they hold it (HMAC-SHA256 of a nonce
//     of each side, see wire.go); without one, any process that reaches rank 0
//     first may take a rank.
//   - When the exchange fails, rank 0 sends the reason to every rank that came.
package rendezvous

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config says where and who this process is.
type Config struct {
	// Addr is rank 0's host:port (MASTER_ADDR:MASTER_PORT).
	Addr string
	// Rank and Size place this process in the world.
	Rank, Size int
	// Timeout bounds the whole exchange.
	Timeout time.Duration
	// Secret, when not empty, is shared by every rank of the run: hellos and
	// replies without its mac are refused.
	Secret []byte
	// Log receives a line for every refused connection (nil: standard error).
	Log func(msg string)
}

// SecretVar is the environment variable the runner reads Config.Secret from.
const SecretVar = "LCC_COMM_SECRET"

// Peer is one rank as the rendezvous saw it.
type Peer struct {
	// Host is the address rank 0 saw the rank connect from (rank 0's own is the
	// host of Config.Addr).
	Host string
	// Card is the blob the rank passed to Exchange.
	Card []byte
}

// Result is what every rank learns.
type Result struct {
	Peers []Peer
	// Token is random per run; data connections present it, so that a stray
	// connection is refused.
	Token [16]byte
}

// helloTimeout bounds how long rank 0 waits for a connection's hello (a
// variable for the tests).
var helloTimeout = 5 * time.Second

// maxPending bounds the connections whose hello rank 0 awaits at once; more
// are closed unread until some finish.
const maxPending = 256

// maxRecorded bounds the refusals rank 0 logs and keeps for its error: a flood
// of strangers must not fill memory or the log.
const maxRecorded = 32

// maxCard bounds a card or a host name on the wire.
const maxCard = 1 << 16

// Exchange meets the other ranks and returns every rank's card.
func Exchange(cfg Config, card []byte) (*Result, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("rendezvous: rank %d of world size %d", cfg.Rank, cfg.Size)
	}
	if len(card) > maxCard {
		return nil, fmt.Errorf("rendezvous: card of %d bytes (at most %d)", len(card), maxCard)
	}
	if cfg.Timeout <= 0 {
		return nil, errors.New("rendezvous: no timeout")
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: MASTER_ADDR:MASTER_PORT %q: %w", cfg.Addr, err)
	}
	if cfg.Rank == 0 {
		return serve(cfg, host, card)
	}
	return join(cfg, card)
}

// arrival is a connection whose hello checked out (or, with gone set, one
// that closed after it).
type arrival struct {
	conn  net.Conn
	hello *hello
	gone  bool
}

// server is rank 0's side of one exchange.
type server struct {
	cfg      Config
	arrivals chan arrival
	done     chan struct{} // closed when the exchange ends
	pending  chan struct{} // a slot per hello being read
	mu       sync.Mutex
	refused  []string // why the first maxRecorded refused connections were refused
	more     int      // how many were refused after those
}

// serve is rank 0: it collects a card from every other rank, then answers all.
func serve(cfg Config, host string, card []byte) (*Result, error) {
	res := &Result{Peers: make([]Peer, cfg.Size)}
	res.Peers[0] = Peer{Host: host, Card: slices.Clone(card)}
	if _, err := rand.Read(res.Token[:]); err != nil {
		return nil, err
	}
	if cfg.Size == 1 {
		return res, nil
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank 0 cannot listen on %s: %w", cfg.Addr, err)
	}
	deadline := time.Now().Add(cfg.Timeout)
	s := &server{cfg: cfg, arrivals: make(chan arrival), done: make(chan struct{}),
		pending: make(chan struct{}, maxPending)}
	var wg sync.WaitGroup
	defer func() {
		close(s.done)
		ln.Close()
		wg.Wait()
	}()
	wg.Go(func() { s.accept(ln, deadline, &wg) })
	conns := make([]net.Conn, cfg.Size)
	nonces := make([][16]byte, cfg.Size)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for arrived := 1; arrived < cfg.Size; {
		select {
		case <-timer.C:
			err := fmt.Errorf("rendezvous: rank 0 waited %v on %s for ranks %s%s", cfg.Timeout, cfg.Addr,
				missing(conns), s.refusals())
			for r, c := range conns {
				if c != nil { // every rank that came learns why
					c.SetWriteDeadline(time.Now().Add(time.Second))
					c.Write(encodeReply(cfg.Secret, nonces[r], err.Error(), nil))
				}
			}
			return nil, err
		case a := <-s.arrivals:
			r := int(a.hello.rank)
			switch {
			case a.gone:
				if conns[r] == a.conn { // it hung up: a later hello may take the rank
					s.refuse(a.conn, nil, fmt.Sprintf("rank %d (from %s) closed its connection before "+
						"the exchange ended", r, a.conn.RemoteAddr()))
					conns[r] = nil
					arrived--
				}
			case conns[r] != nil:
				s.refuse(a.conn, a.hello, fmt.Sprintf("rank %d is taken (by %s), refused a second "+
					"hello for it from %s", r, conns[r].RemoteAddr(), a.conn.RemoteAddr()))
			default:
				h, _, _ := net.SplitHostPort(a.conn.RemoteAddr().String())
				conns[r], nonces[r], res.Peers[r] = a.conn, a.hello.nonce, Peer{Host: h, Card: a.hello.card}
				arrived++
			}
		}
	}
	for r, c := range conns {
		if c == nil {
			continue
		}
		c.SetWriteDeadline(deadline)
		if _, err := c.Write(encodeReply(cfg.Secret, nonces[r], "", res)); err != nil {
			return nil, fmt.Errorf("rendezvous: rank 0 cannot answer rank %d: %w", r, err)
		}
	}
	return res, nil
}

// accept takes connections until the exchange ends and reads each one's hello
// on its own goroutine, at most maxPending at once.
func (s *server) accept(ln net.Listener, deadline time.Time, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed when the exchange ended
		}
		select {
		case s.pending <- struct{}{}:
			wg.Go(func() {
				defer func() { <-s.pending }()
				s.handle(c, deadline)
			})
		default:
			s.refuse(c, nil, fmt.Sprintf("a connection from %s: %d hellos are awaited already",
				c.RemoteAddr(), maxPending))
		}
	}
}

// handle reads one connection's hello, checks it, and hands it to the exchange;
// it then watches the connection until it closes or the exchange ends.
func (s *server) handle(c net.Conn, deadline time.Time) {
	cfg := s.cfg
	// The exchange's end closes a connection still being read, so that rank 0
	// returns at once.
	read := make(chan struct{})
	defer close(read)
	go func() {
		select {
		case <-s.done:
			c.Close()
		case <-read:
		}
	}()
	helloBy := time.Now().Add(helloTimeout)
	if deadline.Before(helloBy) {
		helloBy = deadline
	}
	c.SetDeadline(helloBy)
	var challenge [16]byte
	rand.Read(challenge[:])
	if _, err := c.Write(append([]byte(magic), challenge[:]...)); err != nil {
		s.refuse(c, nil, fmt.Sprintf("a connection from %s: %v", c.RemoteAddr(), err))
		return
	}
	h, err := decodeHello(bufio.NewReader(c))
	if err != nil {
		s.refuse(c, nil, fmt.Sprintf("a connection from %s sent no hello: %v", c.RemoteAddr(), err))
		return
	}
	var why string
	switch want := helloMAC(cfg.Secret, challenge, h); {
	case !hmac.Equal(h.mac[:], want[:]):
		why = fmt.Sprintf("a hello from %s does not carry the shared secret's mac (is %s the same "+
			"on every rank?)", c.RemoteAddr(), SecretVar)
	case int(h.size) != cfg.Size:
		why = fmt.Sprintf("rank %d (from %s) has world size %d, rank 0 has %d", h.rank, c.RemoteAddr(),
			h.size, cfg.Size)
	case h.rank == 0 || int(h.rank) >= cfg.Size:
		why = fmt.Sprintf("a process from %s says it is rank %d of %d", c.RemoteAddr(), h.rank, cfg.Size)
	}
	if why != "" {
		s.refuse(c, h, why)
		return
	}
	c.SetDeadline(deadline)
	select {
	case s.arrivals <- arrival{conn: c, hello: h}:
	case <-s.done:
		c.Close()
		return
	}
	// The rank sends nothing more: a read returns when it hangs up. The read
	// has no deadline: at the exchange's deadline rank 0 still answers this
	// connection with why it failed, and the exchange's end closes it.
	c.SetReadDeadline(time.Time{})
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil || !isClosedHere(err) {
		select {
		case s.arrivals <- arrival{conn: c, hello: h, gone: true}:
		case <-s.done:
		}
	}
}

// dial connects to rank 0 and reads its challenge, retrying until the deadline
// while rank 0 does not listen yet, or closes the connection unread (it is busy
// with maxPending strangers).
func dial(cfg Config, deadline time.Time) (net.Conn, *bufio.Reader, [16]byte, error) {
	var challenge [16]byte
	for {
		c, err := net.DialTimeout("tcp", cfg.Addr, time.Until(deadline))
		if err == nil {
			c.SetDeadline(deadline)
			r := bufio.NewReader(c)
			if err = readMagic(r); err == nil {
				if _, err = io.ReadFull(r, challenge[:]); err == nil {
					return c, r, challenge, nil
				}
			}
			c.Close()
			if errors.Is(err, errNotOurs) {
				return nil, nil, challenge, fmt.Errorf("rendezvous: rank %d: %s does not speak lcc's "+
					"rendezvous", cfg.Rank, cfg.Addr)
			}
		}
		if time.Now().Add(100 * time.Millisecond).After(deadline) {
			return nil, nil, challenge, fmt.Errorf("rendezvous: rank %d cannot reach rank 0 at %s within %v: %w",
				cfg.Rank, cfg.Addr, cfg.Timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isClosedHere reports whether err is a read on a connection rank 0 closed
// itself (the exchange ended), rather than one the peer closed.
func isClosedHere(err error) bool { return errors.Is(err, net.ErrClosed) }

// refuse drops c, telling its sender why when it sent a hello, and records why.
func (s *server) refuse(c net.Conn, h *hello, why string) {
	if h != nil {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(encodeReply(s.cfg.Secret, h.nonce, "refused this rank's hello: "+why, nil))
	}
	c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(s.refused) < maxRecorded:
		s.refused = append(s.refused, why)
	case s.more == 0:
		why = fmt.Sprintf("%s; refused %d connections, the next are counted, not logged", why, maxRecorded+1)
		s.more++
	default:
		s.more++
		return
	}
	if s.cfg.Log != nil {
		s.cfg.Log("rendezvous: " + why)
	} else {
		fmt.Fprintf(os.Stderr, "lcc: rendezvous: %s\n", why)
	}
}

// refusals says what rank 0 refused while it waited, for its timeout error.
func (s *server) refusals() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) == 0 {
		return ""
	}
	const most = 8
	msg := "; refused meanwhile: " + strings.Join(s.refused[:min(len(s.refused), most)], "; ")
	if n := len(s.refused) + s.more - most; n > 0 {
		msg += fmt.Sprintf("; and %d more", n)
	}
	return msg
}

// missing lists the ranks that have not arrived.
func missing(conns []net.Conn) string {
	var m []string
	for r := 1; r < len(conns); r++ {
		if conns[r] == nil {
			m = append(m, fmt.Sprint(r))
		}
	}
	return strings.Join(m, ", ")
}

// join is every rank but 0: it dials rank 0 until it answers, answers its
// challenge with its hello and reads everyone's cards.
func join(cfg Config, card []byte) (*Result, error) {
	deadline := time.Now().Add(cfg.Timeout)
	c, r, challenge, err := dial(cfg, deadline)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	h := &hello{rank: uint32(cfg.Rank), size: uint32(cfg.Size), card: card}
	rand.Read(h.nonce[:])
	h.mac = helloMAC(cfg.Secret, challenge, h)
	if _, err := c.Write(h.encode()); err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d: sending to rank 0 at %s: %w", cfg.Rank, cfg.Addr, err)
	}
	res, err := decodeReply(r, cfg.Size, cfg.Secret, h.nonce)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d: %w", cfg.Rank, err)
	}
	return res, nil
}
