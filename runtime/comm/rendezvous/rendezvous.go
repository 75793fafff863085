// Package rendezvous lets the processes of one multi-rank run find each other,
// as torchrun's static rendezvous does: rank 0 listens on MASTER_ADDR:MASTER_PORT,
// every other rank connects to it and sends a card (an opaque blob: the address of
// its data listener for runtime/comm/tcp, nothing for NCCL), and rank 0 answers
// every rank with all the cards, each with the host rank 0 saw it connect from,
// and a random session token. On GPUs rank 0's card is the NCCL unique id.
//
// Invariants:
//   - Nothing waits forever: Exchange fails after Config.Timeout naming the ranks
//     that did not arrive (on rank 0) or the address it could not reach.
//   - A card from a rank outside the world, a second card for one rank, or a
//     peer of another world size fails the exchange on every rank with an error
//     naming it; rank 0 sends the reason to the ranks that did arrive.
//
// Wire format (little-endian): hello = magic, u32 rank, u32 size, bytes card;
// reply = magic, u8 status (0 ok; 1 error, then bytes message), 16-byte token,
// then per rank: bytes host, bytes card. "bytes" is a u32 length and the bytes.
package rendezvous

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
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
}

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

const magic = "lccrdv01"

// helloTimeout bounds how long rank 0 waits for a connection's hello.
const helloTimeout = 5 * time.Second

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
	defer ln.Close()
	deadline := time.Now().Add(cfg.Timeout)
	ln.(*net.TCPListener).SetDeadline(deadline)
	conns := make([]net.Conn, cfg.Size)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	fail := func(err error, also net.Conn) (*Result, error) {
		for _, c := range append(conns, also) {
			if c != nil { // every rank that came learns why
				c.SetWriteDeadline(time.Now().Add(time.Second))
				writeReply(c, err.Error(), res)
			}
		}
		return nil, err
	}
	for arrived := 1; arrived < cfg.Size; {
		c, err := ln.Accept()
		if err != nil {
			return fail(fmt.Errorf("rendezvous: rank 0 waited %v on %s for ranks %s: %w", cfg.Timeout,
				cfg.Addr, missing(conns), err), nil)
		}
		// A stray connection that never speaks must not hold up the real ranks.
		hello := time.Now().Add(helloTimeout)
		if deadline.Before(hello) {
			hello = deadline
		}
		c.SetDeadline(hello)
		r, size, card, err := readHello(c)
		c.SetDeadline(deadline)
		if err != nil {
			// Not one of ours (a port scanner, a stale process): ignore it.
			c.Close()
			continue
		}
		var bad error
		switch {
		case size != cfg.Size:
			bad = fmt.Errorf("rendezvous: rank %d (from %s) has world size %d, rank 0 has %d", r,
				c.RemoteAddr(), size, cfg.Size)
		case r <= 0 || r >= cfg.Size:
			bad = fmt.Errorf("rendezvous: a process from %s says it is rank %d of %d", c.RemoteAddr(),
				r, cfg.Size)
		case conns[r] != nil:
			bad = fmt.Errorf("rendezvous: two processes say they are rank %d (from %s and %s)", r,
				conns[r].RemoteAddr(), c.RemoteAddr())
		}
		if bad != nil {
			defer c.Close()
			return fail(bad, c)
		}
		h, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		conns[r], res.Peers[r] = c, Peer{Host: h, Card: card}
		arrived++
	}
	for r, c := range conns {
		if c == nil {
			continue
		}
		if err := writeReply(c, "", res); err != nil {
			return nil, fmt.Errorf("rendezvous: rank 0 cannot answer rank %d: %w", r, err)
		}
	}
	return res, nil
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

// join is every rank but 0: it dials rank 0 until it answers, sends its card and
// reads everyone's.
func join(cfg Config, card []byte) (*Result, error) {
	deadline := time.Now().Add(cfg.Timeout)
	var (
		c   net.Conn
		err error
	)
	for {
		// Rank 0 may not listen yet: retry until the deadline.
		c, err = net.DialTimeout("tcp", cfg.Addr, time.Until(deadline))
		if err == nil {
			break
		}
		if time.Now().Add(100 * time.Millisecond).After(deadline) {
			return nil, fmt.Errorf("rendezvous: rank %d cannot reach rank 0 at %s within %v: %w", cfg.Rank,
				cfg.Addr, cfg.Timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	w := bufio.NewWriter(c)
	w.WriteString(magic)
	putU32(w, uint32(cfg.Rank))
	putU32(w, uint32(cfg.Size))
	putBytes(w, card)
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d: sending to rank 0 at %s: %w", cfg.Rank, cfg.Addr, err)
	}
	res, err := readReply(bufio.NewReader(c), cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d: %w", cfg.Rank, err)
	}
	return res, nil
}

func readHello(c net.Conn) (rank, size int, card []byte, err error) {
	r := bufio.NewReader(c)
	m := make([]byte, len(magic))
	if _, err = io.ReadFull(r, m); err != nil || string(m) != magic {
		return 0, 0, nil, errors.New("bad magic")
	}
	var rk, sz uint32
	if rk, err = getU32(r); err != nil {
		return
	}
	if sz, err = getU32(r); err != nil {
		return
	}
	card, err = getBytes(r)
	return int(rk), int(sz), card, err
}

// writeReply sends the cards, or msg when the exchange failed.
func writeReply(c net.Conn, msg string, res *Result) error {
	w := bufio.NewWriter(c)
	w.WriteString(magic)
	if msg != "" {
		w.WriteByte(1)
		putBytes(w, []byte(msg))
		return w.Flush()
	}
	w.WriteByte(0)
	w.Write(res.Token[:])
	for _, p := range res.Peers {
		putBytes(w, []byte(p.Host))
		putBytes(w, p.Card)
	}
	return w.Flush()
}

func readReply(r *bufio.Reader, size int) (*Result, error) {
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(r, m); err != nil {
		return nil, fmt.Errorf("no answer from rank 0: %w", err)
	}
	if string(m) != magic {
		return nil, errors.New("rank 0's address answers, but not with lcc's rendezvous")
	}
	st, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	if st != 0 {
		msg, _ := getBytes(r)
		return nil, fmt.Errorf("rank 0 failed the rendezvous: %s", msg)
	}
	res := &Result{Peers: make([]Peer, size)}
	if _, err := io.ReadFull(r, res.Token[:]); err != nil {
		return nil, err
	}
	for i := range res.Peers {
		h, err := getBytes(r)
		if err != nil {
			return nil, err
		}
		card, err := getBytes(r)
		if err != nil {
			return nil, err
		}
		res.Peers[i] = Peer{Host: string(h), Card: card}
	}
	return res, nil
}

func putU32(w *bufio.Writer, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	w.Write(b[:])
}

func putBytes(w *bufio.Writer, b []byte) {
	putU32(w, uint32(len(b)))
	w.Write(b)
}

func getU32(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func getBytes(r io.Reader) ([]byte, error) {
	n, err := getU32(r)
	if err != nil {
		return nil, err
	}
	if n > maxCard {
		return nil, fmt.Errorf("a field of %d bytes (at most %d)", n, maxCard)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}
