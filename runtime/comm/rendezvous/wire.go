package rendezvous

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The wire format, little-endian. "bytes" is a u32 length and the bytes.
//
//	challenge (rank 0, on accept)  magic, 16-byte nonce
//	hello     (the joining rank)   magic, u32 rank, u32 size, bytes card,
//	                               16-byte nonce, 32-byte mac
//	reply     (rank 0)             magic, u8 status, then for status 0 a 16-byte
//	                               token and per rank bytes host, bytes card, or
//	                               for status 1 bytes message; then a 32-byte mac
//
// A hello's mac is HMAC-SHA256 under the shared secret (Config.Secret; empty
// when there is none) of "hello", rank 0's nonce and the hello's fields; a
// reply's of "reply", the joining rank's nonce and the reply after its magic.
// Each side's nonce makes the other's mac good for one connection only, so a
// recorded hello or reply cannot be replayed.
const magic = "lccrdv02"

// hello is what a joining rank sends.
type hello struct {
	rank, size uint32
	card       []byte
	nonce      [16]byte
	mac        [32]byte
}

// helloMAC is the mac of h's fields answering challenge under secret.
func helloMAC(secret []byte, challenge [16]byte, h *hello) [32]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("hello"))
	m.Write(challenge[:])
	var b bytes.Buffer
	h.fields(&b)
	m.Write(b.Bytes())
	return [32]byte(m.Sum(nil))
}

// fields writes the hello between its magic and its mac.
func (h *hello) fields(b *bytes.Buffer) {
	b.Write(binary.LittleEndian.AppendUint32(nil, h.rank))
	b.Write(binary.LittleEndian.AppendUint32(nil, h.size))
	putBytes(b, h.card)
	b.Write(h.nonce[:])
}

// encode is the hello on the wire.
func (h *hello) encode() []byte {
	var b bytes.Buffer
	b.WriteString(magic)
	h.fields(&b)
	b.Write(h.mac[:])
	return b.Bytes()
}

// errNotOurs says a connection does not speak lcc's rendezvous at all.
var errNotOurs = errors.New("not lcc's rendezvous (bad magic)")

// decodeHello reads one hello. It reads no more than the hello's bytes, and
// a field past maxCard is an error before anything is allocated for it.
func decodeHello(r io.Reader) (*hello, error) {
	if err := readMagic(r); err != nil {
		return nil, err
	}
	h := &hello{}
	var err error
	if h.rank, err = getU32(r); err != nil {
		return nil, err
	}
	if h.size, err = getU32(r); err != nil {
		return nil, err
	}
	if h.card, err = getBytes(r); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(r, h.nonce[:]); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(r, h.mac[:]); err != nil {
		return nil, err
	}
	return h, nil
}

func readMagic(r io.Reader) error {
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(r, m); err != nil {
		return err
	}
	if string(m) != magic {
		return errNotOurs
	}
	return nil
}

// encodeReply is rank 0's answer to the rank that sent nonce: the cards, or
// msg when its hello is refused or the exchange failed.
func encodeReply(secret []byte, nonce [16]byte, msg string, res *Result) []byte {
	var body bytes.Buffer
	if msg != "" {
		body.WriteByte(1)
		putBytes(&body, []byte(msg))
	} else {
		body.WriteByte(0)
		body.Write(res.Token[:])
		for _, p := range res.Peers {
			putBytes(&body, []byte(p.Host))
			putBytes(&body, p.Card)
		}
	}
	mac := replyMAC(secret, nonce, body.Bytes())
	return append(append([]byte(magic), body.Bytes()...), mac[:]...)
}

func replyMAC(secret []byte, nonce [16]byte, body []byte) [32]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("reply"))
	m.Write(nonce[:])
	m.Write(body)
	return [32]byte(m.Sum(nil))
}

// decodeReply reads rank 0's answer for a world of size ranks and checks its
// mac against the nonce this rank sent.
func decodeReply(r *bufio.Reader, size int, secret []byte, nonce [16]byte) (*Result, error) {
	if err := readMagic(r); err != nil {
		if errors.Is(err, errNotOurs) {
			return nil, errors.New("rank 0's address answers, but not with lcc's rendezvous")
		}
		return nil, fmt.Errorf("no answer from rank 0: %w", err)
	}
	// The body is read through a tee so that its mac can be checked.
	var body bytes.Buffer
	t := io.TeeReader(r, &body)
	var st [1]byte
	if _, err := io.ReadFull(t, st[:]); err != nil {
		return nil, err
	}
	var msg []byte
	res := &Result{Peers: make([]Peer, size)}
	if st[0] != 0 {
		var err error
		if msg, err = getBytes(t); err != nil {
			return nil, err
		}
	} else {
		if _, err := io.ReadFull(t, res.Token[:]); err != nil {
			return nil, err
		}
		for i := range res.Peers {
			h, err := getBytes(t)
			if err != nil {
				return nil, err
			}
			card, err := getBytes(t)
			if err != nil {
				return nil, err
			}
			res.Peers[i] = Peer{Host: string(h), Card: card}
		}
	}
	var mac [32]byte
	if _, err := io.ReadFull(r, mac[:]); err != nil {
		return nil, err
	}
	if want := replyMAC(secret, nonce, body.Bytes()); !hmac.Equal(mac[:], want[:]) {
		return nil, errors.New("rank 0's answer does not carry the shared secret's mac " +
			"(is " + SecretVar + " the same on every rank?)")
	}
	if st[0] != 0 {
		return nil, fmt.Errorf("rank 0 failed the rendezvous: %s", msg)
	}
	return res, nil
}

func putBytes(b *bytes.Buffer, p []byte) {
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(p))))
	b.Write(p)
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
